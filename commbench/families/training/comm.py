"""Every collective of a schedule goes through `Comm`: issued asynchronously
(torch.distributed work handles), counted, and logged so it can be replayed.

- mode "full": collectives really run; "compute": they are skipped (the
  schedule's compute alone: `compute_us`).
- While `recording`, each issue adds its bytes (bytes.bus_bytes of the real
  tensor sizes: the `_measured` byte column) and an entry to `log`; each wait
  adds an entry too. `Replay` re-issues the log with compute removed
  (`comm_us`): the same collectives, sizes, order and waits.
- On a GPU the schedule runs on its compute stream; torch's NCCL work runs on
  the group's own communication stream, ordered after the compute enqueued
  before the issue, and `wait()` makes the compute stream wait on the work's
  CUDA event. With gloo (CPU) the work runs on gloo's threads and `wait()`
  blocks, so the same code overlaps on the host.

Tags name handles that a later step waits for (distopt's parameter
all-gather); untagged issues get a per-step number.

On the CPU a `timeline` (measure/host_timeline.py) may be set for the timed
steps: each collective reports its issue and its completion (gloo's future, or
the wait that found it done), and each wait reports the time the host was
blocked in it. On a GPU the profiler sees the kernels themselves.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...measure.host_timeline import now_us
from .bytes import KINDS, bus_bytes


@dataclass
class Handle:
    comm: Comm
    tag: str
    works: list = field(default_factory=list)
    done: bool = False
    restore: object = None   # a version-counter guard to re-apply once the work is done
    timeline: object = None   # the host timeline the works were issued under (CPU, timed steps)
    tokens: list = field(default_factory=list)   # the works' entries on it

    def wait(self) -> None:
        if self.done:
            return
        timeline = self.timeline
        start = now_us() if timeline is not None else 0.0
        for work in self.works:
            work.wait()
        if timeline is not None:
            end = now_us()
            timeline.blocked(start, end)
            for token in self.tokens:
                timeline.comm_done(token, end)
        if self.restore is not None:
            self.restore.__exit__(None, None, None)
        self.done = True
        self.works = []
        if self.comm.recording:
            self.comm.log.append(("wait", self.tag, None))


class Comm:
    def __init__(self, rank: int):
        self.rank = rank
        self.mode = "full"
        self.recording = False
        self.log: list[tuple] = []
        self.sent_bytes = dict.fromkeys(KINDS, 0.0)
        self._n = 0
        self.side_stream = None   # CUDA: where chained collectives wait, off the compute stream
        self.timeline = None      # CPU: the host timeline of the timed steps (None: not recorded)

    def begin_step(self) -> None:
        self._n = 0

    def start_recording(self) -> None:
        self.recording, self.log = True, []
        self.sent_bytes = dict.fromkeys(KINDS, 0.0)

    # -- collectives (all asynchronous; wait on the returned handle) --
    def all_gather(self, out, inp, group, tag: str | None = None) -> Handle:
        import torch
        import torch.distributed as dist

        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

        # autograd may have saved views of `out` (fsdp re-gathers parameters that forward saved
        # for backward): the write must not count as a modification. gloo bumps the version
        # counter on its own thread, so it is restored once the work is done (Handle.wait).
        keep = torch.autograd._unsafe_preserve_version_counter(out)
        handle = self._issue("all_gather", lambda: [gather(out, inp, group=group, async_op=True)],
                             _nbytes(out), _size(group), (out, inp, group), tag)
        keep.__exit__(None, None, None)
        handle.restore = keep
        return handle

    def reduce_scatter(self, out, inp, group, tag: str | None = None) -> Handle:
        import torch.distributed as dist

        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return self._issue("reduce_scatter", lambda: [scatter(out, inp, group=group, async_op=True)],
                           _nbytes(inp), _size(group), (out, inp, group), tag)

    def all_reduce(self, tensor, group, tag: str | None = None) -> Handle:
        import torch.distributed as dist
        return self._issue("all_reduce", lambda: [dist.all_reduce(tensor, group=group, async_op=True)],
                           _nbytes(tensor), _size(group), (tensor, None, group), tag)

    def all_to_all(self, out, inp, group, tag: str | None = None) -> Handle:
        import torch.distributed as dist
        return self._issue("all_to_all", lambda: [dist.all_to_all_single(out, inp, group=group, async_op=True)],
                           _nbytes(inp), _size(group), (out, inp, group), tag)

    def exchange(self, send, dst: int, recv, src: int, tag: str | None = None, p2p_tag: int = 0) -> Handle:
        """Send `send` to global rank dst and receive `recv` from src (one batched p2p group).

        `p2p_tag` keeps two exchanges in flight between the same ranks apart (gloo matches
        messages by tag; NCCL orders them on the stream)."""
        import torch.distributed as dist

        def issue():
            if dst == self.rank:
                recv.copy_(send)
                return []
            ops = [dist.P2POp(dist.isend, send, dst, tag=p2p_tag), dist.P2POp(dist.irecv, recv, src, tag=p2p_tag)]
            return dist.batch_isend_irecv(ops)
        nbytes = 0 if dst == self.rank else _nbytes(send)
        return self._issue("send", issue, nbytes, 2, (recv, send, (dst, src, p2p_tag)), tag)

    def chain(self, first: Handle, issue) -> Handle:
        """Issue a collective that needs `first` done, without making compute wait for it.

        On a GPU the wait and the issue happen on a side stream (the compute stream only
        waits for the returned handle); with gloo the host waits for `first`, then issues."""
        if self.side_stream is None:
            first.wait()
            return issue()
        import torch

        with torch.cuda.stream(self.side_stream):
            first.wait()
            return issue()

    def _issue(self, kind, fn, nbytes: int, n: int, desc: tuple, tag: str | None) -> Handle:
        if tag is None:
            self._n += 1
            tag = f"#{self._n}"
        if self.recording:
            self.sent_bytes[kind] += bus_bytes(kind, nbytes, n)
            out, inp, where = desc
            self.log.append(("issue", tag, (kind, _spec(out), _spec(inp), where)))
        works = [w for w in (fn() if self.mode == "full" else []) if w is not None]
        handle = Handle(self, tag, works)
        if self.timeline is not None:
            handle.timeline = self.timeline
            handle.tokens = [_track(self.timeline, kind, w) for w in works]
        return handle


def _track(timeline, kind: str, work) -> int:
    """A work's entry on the host timeline, closed by gloo's future when it completes (works
    without a future are closed by the wait that sees them done)."""
    token = timeline.comm_started(kind)
    try:
        work.get_future().then(lambda _fut: timeline.comm_done(token))
    except (RuntimeError, AttributeError):
        pass
    return token


def _nbytes(t) -> int:
    return t.numel() * t.element_size()


def _size(group) -> int:
    import torch.distributed as dist
    return dist.get_world_size(group)


def _spec(t):
    return None if t is None else (tuple(t.shape), t.dtype, t.device)


class Replay:
    """The logged collectives of one step, re-issued on fixed buffers with compute removed."""

    def __init__(self, log: list[tuple], comm: Comm):
        import torch

        self.comm = comm
        self.log = log
        self.handles: dict[str, Handle] = {}
        self._buffers: dict[tuple, object] = {}

        def buf(role, spec):
            if spec is None:
                return None
            key = (role, *spec)
            if key not in self._buffers:
                shape, dtype, device = spec
                self._buffers[key] = torch.ones(shape, dtype=dtype, device=device)
            return self._buffers[key]
        self.steps = []
        for what, tag, desc in log:
            if what == "issue":
                kind, out_spec, in_spec, where = desc
                self.steps.append(("issue", tag, (kind, buf("out", out_spec), buf("in", in_spec), where)))
            else:
                self.steps.append(("wait", tag, None))

    def step(self) -> None:
        c = self.comm
        for what, tag, desc in self.steps:
            if what == "wait":
                handle = self.handles.pop(tag, None)
                if handle is not None:
                    handle.wait()
                continue
            kind, out, inp, where = desc
            if kind == "all_gather":
                h = c.all_gather(out, inp, where, tag)
            elif kind == "reduce_scatter":
                h = c.reduce_scatter(out, inp, where, tag)
            elif kind == "all_reduce":
                h = c.all_reduce(out, where, tag)
            elif kind == "all_to_all":
                h = c.all_to_all(out, inp, where, tag)
            else:
                h = c.exchange(inp, where[0], out, where[1], tag, p2p_tag=where[2])
            self.handles[tag] = h

    def drain(self) -> None:
        for handle in self.handles.values():
            handle.wait()
        self.handles.clear()
