"""Read the NCCL profiler plugin's JSON lines and turn one Case's records into row columns.

The plugin writes, per process and communicator, ``traces/nccl/nccl-<host>-pid<P>-comm<C>-rank<R>.jsonl``:
an ``init`` line, one line per finished task (``coll`` or ``p2p``), ``pxn`` lines for proxy
work done for another process, ``mark`` lines commbench asks for around each timed batch
(``begin <case_id>`` / ``end <case_id>``), and ``finalize``. Times: ``*_ns`` host stamps are
CLOCK_MONOTONIC (Python's perf_counter_ns); kernel channel stamps are the GPU's
%globaltimer (ns), a different clock, related to the host by :func:`gpu_to_host_ns`.
"""
from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..sysinfo.nccl_log import ALGOS, PROTOS

NO_EVENTS_ONE_RANK = "no events (1 rank)"
# the plugin reports NCCL's own spellings; rows use the NCCL_ALGO / NCCL_PROTO ones, as the log parser does
_CANON = {name.upper(): name for name in (*ALGOS, *PROTOS)} | {"NVLS_TREE": "NVLSTree",
                                                              "COLLNET_DIRECT": "CollNetDirect",
                                                              "COLLNET_CHAIN": "CollNetChain"}


def canonical(name: str) -> str:
    return _CANON.get(name.upper(), name)


@dataclass
class Task:
    """One collective or point-to-point task as the plugin recorded it on one rank."""

    kind: str                   # "coll" | "p2p"
    rank: int
    nranks: int
    seq: int
    func: str
    count: int
    dtype: str
    bytes: int
    algo: str
    proto: str
    nchannels: int
    complete: bool
    enq_ns: tuple[int, int]
    api_ns: tuple[int, int] | None
    channels: list[tuple[int, int, int, int, int]]  # (channel, gpu start, gpu stop, host start, host stop)
    proxies: list[dict] = field(default_factory=list)
    proxy_total: int = 0
    root_or_peer: int = 0       # root of a collective, peer of a send or receive

    @classmethod
    def from_line(cls, d: dict) -> "Task":
        api = d.get("api_ns")
        return cls(kind=d["kind"], rank=int(d["rank"]), nranks=int(d["nranks"]), seq=int(d.get("seq", 0)),
                   func=d.get("func", ""), count=int(d.get("count", 0)), dtype=d.get("dtype", ""),
                   bytes=int(d.get("bytes", 0)), algo=d.get("algo", ""), proto=d.get("proto", ""),
                   nchannels=int(d.get("nchannels", 0)), complete=bool(d.get("complete")),
                   enq_ns=tuple(d.get("enq_ns", (0, 0))), api_ns=tuple(api) if api else None,
                   channels=[tuple(int(x) for x in ch) for ch in d.get("ch", [])],
                   proxies=list(d.get("proxy", [])), proxy_total=int(d.get("proxy_total", 0)),
                   root_or_peer=int(d.get("root", d.get("peer", 0))))

    def gpu_window_ns(self) -> tuple[int, int] | None:
        """(first channel start, last channel stop) on the GPU timer; None without a finished channel."""
        done = [(s, e) for _ch, s, e, _hs, _he in self.channels if s and e and e >= s]
        if not done:
            return None
        return min(s for s, _ in done), max(e for _, e in done)

    @property
    def kernel_ns(self) -> int | None:
        win = self.gpu_window_ns()
        return None if win is None else win[1] - win[0]

    @property
    def enqueue_ns(self) -> int:
        """Host time in the API call (ncclAllReduce...); the task's enqueue when the call's end is unknown."""
        if self.api_ns and self.api_ns[1] >= self.api_ns[0] > 0:
            return self.api_ns[1] - self.api_ns[0]
        return max(0, self.enq_ns[1] - self.enq_ns[0])

    @property
    def host_start_ns(self) -> int:
        return self.api_ns[0] if self.api_ns and self.api_ns[0] else self.enq_ns[0]

    @property
    def proxy_steps(self) -> int:
        return sum(int(p.get("steps", 0)) for p in self.proxies)


def read_lines(path: Path) -> list[dict]:
    """Every complete JSON line of one plugin file (a line cut by a crash is dropped)."""
    try:
        return parse_lines(Path(path).read_text(errors="replace"))
    except OSError:
        return []


def parse_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def between_marks(lines: list[dict], begin: str, end: str) -> list[dict] | None:
    """Lines after the last ``begin`` mark and before the next ``end`` mark; None if either is missing."""
    start = None
    for i, d in enumerate(lines):
        if d.get("kind") == "mark" and d.get("label") == begin:
            start = i
    if start is None:
        return None
    for j in range(start + 1, len(lines)):
        d = lines[j]
        if d.get("kind") == "mark" and d.get("label") == end:
            return lines[start + 1:j]
    return None


def tasks_of(lines: list[dict]) -> list[Task]:
    return [Task.from_line(d) for d in lines if d.get("kind") in ("coll", "p2p")]


def gpu_to_host_ns(tasks: list[Task]) -> int | None:
    """Offset that puts GPU timer stamps on this rank's host clock (host = gpu + offset).

    The plugin stamps the host clock when the proxy thread *sees* a channel end, which is
    never before the GPU stamped it; the smallest (host seen - GPU stop) over all channels
    is therefore the offset plus the shortest observation delay (the proxy's polling
    interval, a few microseconds): an upper bound that is tight when any channel was seen promptly.
    """
    diffs = [he - e for t in tasks for _ch, _s, e, _hs, he in t.channels if e and he]
    return min(diffs) if diffs else None


def split_iterations(tasks: list[Task], iters: int) -> list[list[Task]] | None:
    """Tasks grouped per timed iteration (each op enqueues the same number of tasks); None if uneven."""
    if iters <= 0 or not tasks or len(tasks) % iters:
        return None
    per = len(tasks) // iters
    ordered = sorted(tasks, key=lambda t: (t.host_start_ns, t.seq))
    return [ordered[i * per:(i + 1) * per] for i in range(iters)]


def rank_summary(lines: list[dict] | None, iters: int, plugin_loaded: bool) -> dict:
    """What one rank recorded for one Case (picklable; rank 0 merges them with :func:`case_columns`)."""
    if lines is None:
        return {"plugin_loaded": plugin_loaded, "marks": False, "tasks": 0}
    tasks = tasks_of(lines)
    out = {"plugin_loaded": plugin_loaded, "marks": True, "tasks": len(tasks),
           "incomplete": sum(not t.complete for t in tasks),
           "nranks": max((t.nranks for t in tasks), default=0)}
    if not tasks:
        return out
    groups = split_iterations(tasks, iters)
    offset = gpu_to_host_ns(tasks)
    per_iter = []
    for group in groups or []:
        wins = [w for w in (t.gpu_window_ns() for t in group) if w]
        per_iter.append({
            "kernel_us": (max(e for _, e in wins) - min(s for s, _ in wins)) / 1e3 if wins else None,
            "kernel_start_ns": (min(s for s, _ in wins) + offset) if wins and offset is not None else None,
            "kernel_end_ns": (max(e for _, e in wins) + offset) if wins and offset is not None else None,
            "enqueue_us": sum(t.enqueue_ns for t in group) / 1e3,
            "proxy_steps": sum(t.proxy_steps for t in group),
        })
    colls = [t for t in tasks if t.kind == "coll"]
    out.update(
        per_iteration=per_iter, even=groups is not None,
        channels=max((t.nchannels for t in tasks), default=0),
        algo=Counter(canonical(t.algo) for t in colls if t.algo).most_common(1),
        proto=Counter(canonical(t.proto) for t in colls if t.proto).most_common(1),
        gpu_to_host_ns=offset, proxy_ops=sum(t.proxy_total for t in tasks),
        funcs=sorted({t.func for t in tasks}),
    )
    return out


def _median(values):
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def case_columns(ranks: list[dict], world_size: int) -> dict:
    """Row columns from every rank's :func:`rank_summary`: kernel_us (median over iterations of the
    slowest rank's kernel span), nccl_channels, nccl_algo/nccl_proto, proxy steps, enqueue time,
    and ``profile_note`` saying why something is missing."""
    cols: dict = {"kernel_us": None, "nccl_channels": None, "nccl_proxy_steps": None, "enqueue_us": None,
                  "profile_note": ""}
    if not any(r.get("plugin_loaded") for r in ranks):
        cols["profile_note"] = ("NCCL did not load the profiler plugin in this Case's processes "
                                "(the Case may not use NCCL; NCCL_DEBUG=INFO shows plugin loading)")
        return cols
    if not all(r.get("marks") for r in ranks):
        cols["profile_note"] = "profiler marks missing on some rank: no records for this Case"
        return cols
    if not any(r.get("tasks") for r in ranks):
        cols["profile_note"] = (NO_EVENTS_ONE_RANK if world_size == 1 else
                                "no events: NCCL emitted no collective events for this Case")
        return cols
    notes = []
    rows = [r.get("per_iteration") or [] for r in ranks]
    n_iter = min((len(x) for x in rows if x), default=0)
    if n_iter and all(len(x) >= n_iter for x in rows):
        slowest = []
        for i in range(n_iter):
            vals = [x[i]["kernel_us"] for x in rows if x and x[i]["kernel_us"] is not None]
            slowest.append(max(vals) if vals else None)
        cols["kernel_us"] = _median(slowest)
        cols["enqueue_us"] = _median(max(x[i]["enqueue_us"] for x in rows if x) for i in range(n_iter))
        cols["nccl_proxy_steps"] = _median(sum(x[i]["proxy_steps"] for x in rows if x) for i in range(n_iter))
    else:
        notes.append("tasks do not divide evenly into the timed iterations on every rank")
    cols["nccl_channels"] = max((r.get("channels", 0) for r in ranks), default=0) or None
    for key, col in (("algo", "nccl_algo"), ("proto", "nccl_proto")):
        votes = Counter()
        for r in ranks:
            for name, n in r.get(key) or []:
                votes[name] += n
        if votes:
            cols[col] = votes.most_common(1)[0][0]
    incomplete = sum(r.get("incomplete", 0) for r in ranks)
    if incomplete:
        notes.append(f"{incomplete} task(s) without every kernel channel's end")
    cols["profile_note"] = "; ".join(notes)
    return cols
