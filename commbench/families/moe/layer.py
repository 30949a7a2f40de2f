"""The MoE layer (op `layer`): dispatch -> SwiGLU experts -> combine, timed as one.

Every backend of the family moves the tokens (layer_peer, layer_nccl,
layer_deepep); the expert step is the same for all (expert_pack: pack, grouped
GEMM, unpack). ``overlap: two_batch`` splits each rank's tokens into two
micro-batches with their own buffers and runs them on two streams, the
dispatch of one overlapping the experts of the other, as SGLang's two-batch
overlap and vLLM's dual-batch overlap do:

    comm stream:    dispatch A | dispatch B      | combine A       | combine B
    compute stream:            | experts A       | experts B       |

Besides the layer (the row's time), ``measure`` times, for two_batch, the
micro-batches one after the other on one stream (serial_us), then runs the
layer once more under the profiler, a separate batch of at most
step_split.PROFILED_STEPS steps (layer_profile.py): dispatch, experts and
combine, the exposed communication and what two-batch overlap hid come from
that GPU timeline (layer_timeline.py), never from the timed batch.
"""
from __future__ import annotations

import math
import statistics
from contextlib import nullcontext

import torch

from ...comm.agree import agree
from ...errors import SkipCase
from ...measure import step_split, timing
from ...measure.state import CaseState
from . import layer_profile, layer_ref, layer_timeline
from . import reference as ref
from .experts import LocalExperts
from .expert_pack import ExpertStep
from .problem import Problem, make_problem
from .routing import Routing
from .workspace import MoeCudaError

def micro_batches(tokens: int, overlap: str) -> list[tuple[int, int]]:
    """(first token, tokens) of each micro-batch."""
    if overlap != "two_batch":
        return [(0, tokens)]
    first = -(-tokens // 2)
    return [(0, first), (first, tokens - first)]


def sub_routing(routing: Routing, start: int, count: int) -> Routing:
    """The routing of tokens start..start+count-1 of every rank."""
    T = routing.num_tokens
    rows = torch.cat([torch.arange(r * T + start, r * T + start + count)
                      for r in range(routing.num_ranks)])
    return Routing(routing.topk_idx[rows], routing.topk_weights[rows], routing.num_ranks, count,
                   routing.num_experts, routing.method, routing.seed)


def local_pairs(routing: Routing, rank: int) -> int:
    """(token, expert) choices, over all ranks' tokens, that fall on this rank's experts."""
    L = routing.local_experts
    return int(routing.tokens_per_expert()[rank * L:(rank + 1) * L].sum())


class MicroBatch:
    def __init__(self, comm, step: ExpertStep):
        self.comm, self.step = comm, step

    def experts(self) -> None:
        self.step.run(self.comm.source, self.comm.sink)


class LayerState(CaseState):
    """One layer Case on this rank. The layer times itself (``measure``: the layer, then each
    part alone), so the runner calls measure, then the family's check and teardown."""

    def __init__(self, case, ctx, prm: dict, group=None):
        super().__init__()  # CaseState defaults; fields set below
        self.world, self.device = ctx.world, torch.device(ctx.device)
        world = self.world
        self.problem: Problem = make_problem(case.size_bytes, prm, world.rank, world.size,
                                             case.dtype)
        p = self.problem
        self.inter, self.overlap = prm["intermediate"], prm["overlap"]
        self.mode = timing.mode_for(case.timing, on_stream=True)
        self.timing_label = self.mode
        self.measure = self._measure_layer
        self.stream = torch.cuda.Stream(self.device)
        self.side = torch.cuda.Stream(self.device) if self.overlap == "two_batch" else None
        self.events = [torch.cuda.Event() for _ in range(4)]
        self.regions = False   # annotate dispatch / experts / combine (the profiled batch only)
        self.count = p.tokens
        self.mbs: list[MicroBatch] = []
        self._deepep_normal = None
        self._uccl = None   # UCCL-EP's Buffer of this Case, destroyed in close()
        spans = micro_batches(p.tokens, self.overlap)
        self.max_tokens = max(prm["max_tokens"], max(n for _, n in spans))

        def local_setup():
            with torch.cuda.device(self.device):
                self.x = ref.make_tokens(p.rank, p.tokens, p.hidden, self.device)
                L = p.local_experts
                self.experts = LocalExperts(p.rank * L, L, p.hidden, self.inter, self.device,
                                            prm["gemm"])
        agree(world.comm, local_setup, "building the experts")
        try:
            for i, (start, n) in enumerate(spans):
                self.mbs.append(self._micro_batch(case, ctx, prm, group, i, start, n))
        except BaseException:
            self.close()
            raise
        self.extra.update(grouped_gemm=self.experts.gemm, micro_batches=len(self.mbs),
                          expert_pairs=sum(mb.step.cap for mb in self.mbs))

    def _micro_batch(self, case, ctx, prm, group, index: int, start: int, n: int) -> MicroBatch:
        p = self.problem
        mp = Problem(sub_routing(p.routing, start, n), p.rank, p.dtype, p.hidden, p.num_sms)
        x = self.x[start:start + n]
        comm = self._comm(case.backend, mp, x, ctx, group, index)
        try:
            step = agree(self.world.comm, lambda: ExpertStep(
                self.experts, comm.layout, local_pairs(mp.routing, p.rank), p.topk, p.fp8,
                self.device, max_rows=comm.max_rows, num_segs=getattr(comm, "num_segs", 0)),
                "allocating the expert buffers")
        except BaseException:
            comm.close()
            raise
        return MicroBatch(comm, step)

    def _comm(self, backend: str, mp: Problem, x, ctx, group, index: int):
        dev, world = self.device, self.world
        if backend in ("ipc", "ipc_ll"):
            from .layer_peer import PeerComm

            mode = "normal" if backend == "ipc" else "ll"
            self._require_memory(mp, mode)
            return PeerComm(mp, x, mode, world.comm, dev, self.max_tokens)
        if backend == "nvshmem_ll":
            from ...comm import nvshmem as boot
            from .layer_deepep import LL_CACHE_KEY
            from .layer_peer import PeerComm

            if LL_CACHE_KEY in ctx.cache:
                raise SkipCase("DeepEP's low-latency buffer brought NVSHMEM up in this launch; "
                               "nvshmem_ll needs its own (put it in another launch)")
            handle = boot.ensure(ctx)
            self.extra.update(nvshmem_mode=handle.status_name)
            return PeerComm(mp, x, "ll", world.comm, dev, self.max_tokens, transport="nvshmem",
                            handle=handle, buffer_name=f"moe_layer_mb{index}")
        if backend in ("nccl_a2a", "nccl_agrs", "symm_a2av"):
            from .layer_nccl import NcclComm

            return NcclComm(mp, x, backend, group, dev)
        if backend == "deepep":
            from .layer_deepep import DeepEPNormalComm, normal_buffer

            if self._deepep_normal is None:
                self._deepep_normal = normal_buffer(world.comm, mp.num_sms)
            return DeepEPNormalComm(mp, x, self._deepep_normal, dev)
        if backend == "deepep_ll":
            from .layer_deepep import DeepEPLowLatencyComm, low_latency_buffer

            buffer = low_latency_buffer(ctx, mp, self.max_tokens)
            return DeepEPLowLatencyComm(mp, x, buffer, self.max_tokens, dev)
        if backend in ("uccl_ep", "uccl_ep_ll"):
            from .layer_deepep import DeepEPLowLatencyComm, DeepEPNormalComm, uccl_layer_buffer

            ll = backend == "uccl_ep_ll"
            if self._uccl is None:
                self._uccl = uccl_layer_buffer(group, mp, self.max_tokens, ll, mp.num_sms)
            if ll:
                return DeepEPLowLatencyComm(mp, x, self._uccl, self.max_tokens, dev)
            return DeepEPNormalComm(mp, x, self._uccl, dev)
        raise ValueError(f"no layer over backend {backend!r}")

    def _require_memory(self, mp: Problem, mode: str) -> None:
        """Skip (on every rank alike) a workspace that cannot fit: the low-latency layout holds
        local experts x ranks x max_tokens rows, far too many for prefill batches."""
        from .peer import workspace_sizes

        sharing = -(-self.world.local_size // torch.cuda.device_count())   # ranks per GPU
        need = sum(workspace_sizes(mp, mode, self.max_tokens).values()) * sharing
        free = min(self.world.allgather(int(torch.cuda.mem_get_info(self.device)[0])))
        if need > free:
            raise SkipCase(f"the {mode} workspace needs {need / 1e9:.1f} GB per GPU and "
                           f"{free / 1e9:.1f} GB are free")

    # --- the schedules (enqueue only; the current stream is the compute stream) --------
    def run(self) -> None:
        if self.side is None:
            self.run_serial()
        else:
            self.run_overlapped()

    def _region(self, part: str, index: int):
        if not self.regions:
            return nullcontext()
        from torch.profiler import record_function

        return record_function(layer_timeline.region_label(part, index))

    def run_serial(self) -> None:
        for i, mb in enumerate(self.mbs):
            with self._region("dispatch", i):
                mb.comm.dispatch()
            with self._region("experts", i):
                mb.experts()
            with self._region("combine", i):
                mb.comm.combine()

    def run_overlapped(self) -> None:
        # Enqueue order matters when a dispatch blocks the host (DeepEP normal mode waits for
        # its counts): experts A are enqueued before dispatch B, so they run meanwhile.
        main, side = torch.cuda.current_stream(self.device), self.side
        a, b = self.mbs
        d_a, e_a, d_b, e_b = self.events
        region = self._region
        side.wait_stream(main)
        with torch.cuda.stream(side), region("dispatch", 0):
            a.comm.dispatch()
            d_a.record(side)
        main.wait_event(d_a)
        with region("experts", 0):
            a.experts()
        e_a.record(main)
        with torch.cuda.stream(side):
            with region("dispatch", 1):
                b.comm.dispatch()
            d_b.record(side)
            side.wait_event(e_a)
            with region("combine", 0):
                a.comm.combine()
        main.wait_event(d_b)
        with region("experts", 1):
            b.experts()
        e_b.record(main)
        with torch.cuda.stream(side), region("combine", 1):
            side.wait_event(e_b)
            b.comm.combine()
        main.wait_stream(side)

    # --- measurement --------------------------------------------------------------------
    def _timed(self, fn, warmup: int, iters: int) -> list[float]:
        with torch.cuda.stream(self.stream):
            for _ in range(warmup):
                fn()
        self.stream.synchronize()
        return timing.TIMERS[self.mode](fn, self.stream, iters, self.world.barrier)

    def _slowest_median(self, samples: list[float]) -> float:
        return statistics.median(max(v) for v in zip(*self.world.allgather(samples)))

    def _measure_layer(self, warmup: int, iters: int) -> list[float]:
        """The layer's per-iteration times (the row's time_us); serial_us (two_batch); then the
        timeline's columns from one profiled batch (``timeline`` keeps this rank's)."""
        samples = self._timed(self.run, warmup, iters)
        if self.side is not None:
            self.extra["serial_us"] = self._slowest_median(self._timed(self.run_serial, warmup, iters))
        layer = self._slowest_median(samples)
        serial = self.extra.setdefault("serial_us", layer)
        self.extra.update(layer_us=layer, overlap_gain=serial / layer)
        self._timeline_columns(iters)
        if self.extra.get("expert_us"):   # the expert step against its roofline
            from .expert_roofline import layer_columns

            p = self.problem
            self.extra.update(layer_columns([sub_routing(p.routing, s, n) for s, n in
                                             micro_batches(p.tokens, self.overlap)],
                                            p.rank, p.hidden, self.inter, self.device, self.extra["expert_us"]))
        return samples

    def _timeline_columns(self, iters: int) -> None:
        """The slowest rank's split of the profiled batch (layer_timeline), or timeline_note."""
        windows, intervals, note = layer_profile.profiled_steps(self, iters)
        cols = {}
        if not note:
            try:
                cols = layer_timeline.rank_columns(windows, intervals, self.side is not None)
            except ValueError as exc:
                note = str(exc)
        if not note:   # this rank's, for the run folder (timeline/<case_id>.r<rank>.json)
            self.timeline = {"source": "cupti", "steps": windows, "intervals": intervals}
        gathered = self.world.allgather((cols, note))
        notes = [f"rank {r}: {n}" for r, (_c, n) in enumerate(gathered) if n]
        if notes:
            self.extra["timeline_note"] = "; ".join(notes)[:300]
            return
        rank, cols = step_split.slowest([c for c, _n in gathered])
        p = self.problem
        flops = 2.0 * 3 * p.hidden * self.inter * p.tokens * p.topk   # mean rank's pairs
        self.extra.update(cols, slowest_rank=rank, profiled_steps=len(windows),
                          comm_share=cols["comm_us"] / cols["step_us"] if cols["step_us"] > 0 else None,
                          expert_tflops=flops / (cols["expert_us"] * 1e-6) / 1e12
                          if cols["expert_us"] > 0 else None)

    # --- correctness (untimed) ----------------------------------------------------------
    def _check_local(self) -> tuple[int, float, float]:
        p = self.problem
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            self.run()
        self.stream.synchronize()
        for mb in self.mbs:
            reason = mb.comm.failed() or (
                "the experts received more (token, expert) pairs than the routing sends, or "
                "an impossible count" if mb.step.failed() else "")
            if reason:
                raise MoeCudaError(reason)
        with torch.cuda.device(self.device):
            out = torch.cat([mb.comm.out for mb in self.mbs])
            idx, w = p.routing.of_rank(p.rank)
            expected = layer_ref.reference_layer(layer_ref.expert_inputs(self.x, p.fp8), idx, w,
                                                 p.hidden, self.inter)
            err = layer_ref.token_errors(out, expected)
            wrong = int((~(err <= layer_ref.token_rtol(p.fp8))).sum())
            worst = float(err.max()) if err.numel() else 0.0
            return wrong, worst, ref.calc_diff(out.float(), expected)

    def check(self) -> int:
        """Tokens of this rank whose output differs from the dense reference beyond the tolerance."""
        wrong, worst, diff = agree(self.world.comm, self._check_local, "the layer's check")
        worsts = self.world.allgather(worst)
        self.extra.update(max_token_err=max(worsts, key=lambda e: math.inf if e != e else e),
                          token_rtol=layer_ref.token_rtol(self.problem.fp8), calc_diff=diff)
        return wrong

    def close(self) -> None:
        torch.cuda.synchronize(self.device)
        for mb in self.mbs:
            mb.comm.close()
        self.mbs = []
        if self._deepep_normal is not None:
            self._deepep_normal = None   # DeepEP frees its buffer when the last reference goes
        if self._uccl is not None:   # every rank closes its Case together (the runner's teardown)
            buffer, self._uccl = self._uccl, None
            buffer.destroy()
