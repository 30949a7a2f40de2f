"""Interference family: a GEMM and a collective at once, each one's slowdown against running alone
(docs/families/interference.md).

On one GPU the collective is a 1-rank NCCL op (a local copy through HBM), so what is
measured is memory-bandwidth and SM contention; on several GPUs it is the overlap
question of training and MoE layers: how much compute slows the collective and the
collective slows compute. NCCL's SM knobs (NCCL_MAX_CTAS, NCCL_MIN_CTAS, NCCL_PROTO)
are suite env variants, each a launch of its own. On the CPU (gloo) the same
measurement runs with the collective in a thread beside torch's matmul.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import metrics
from ...comm.context import RankContext
from ...errors import SkipCase
from ...measure.device import nccl_identity_clash
from ...measure.state import CaseState
from ..base import Case, Family, Param, Traffic

OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
GEMM_DIM_MAX = 65536   # a 65536 x 65536 float32 operand is 16 GiB: three of them fill a large GPU


@dataclass
class InterferenceState(CaseState):
    case: Case
    world: object
    pair: object
    gemm: tuple            # (A, B, C)
    bufs: object
    comm: object           # zero-argument collective


class Interference(Family):
    name = "interference"
    summary = "a GEMM and a collective at once on two streams: gemm_slowdown and comm_slowdown vs alone"
    ops = OPS
    backends = ("nccl", "gloo")
    dtypes = ("bfloat16", "float16", "float32")
    default_dtype = "bfloat16"
    needs_gpu = True
    params = {
        "gemm_m": Param(8192, (int,), "rows of the GEMM's A and C", range=(1, GEMM_DIM_MAX)),
        "gemm_n": Param(8192, (int,), "columns of the GEMM's B and C", range=(1, GEMM_DIM_MAX)),
        "gemm_k": Param(8192, (int,), "inner dimension (columns of A, rows of B)", range=(1, GEMM_DIM_MAX)),
    }

    def validate_bench(self, bench: dict) -> list[tuple[str, str]]:
        out = []
        backends = bench.get("backends", [self.backends[0]])
        dtypes = bench.get("dtypes", [self.default_dtype])
        as_list = lambda v: v if isinstance(v, list) else [v]  # noqa: E731
        if "gloo" in as_list(backends) and any(d != "float32" for d in as_list(dtypes)):
            out.append(("dtypes", "the gloo (CPU) path runs float32 only: set dtypes: [float32]"))
        return out

    def setup(self, case: Case, ctx: RankContext) -> InterferenceState:
        from ...comm import buffers
        from . import gemm, overlap

        world = ctx.world
        n, rank = world.size, world.rank
        elem = metrics.DTYPE_BYTES[case.dtype]
        count = metrics.element_count(case.op, case.size_bytes, elem, n)
        if count == 0:
            raise SkipCase(f"{case.size_bytes} B is less than one {case.dtype} element per rank on {n} ranks")
        m, nn, k = (int(case.param(p)) for p in ("gemm_m", "gemm_n", "gemm_k"))
        if case.backend == "nccl":
            import torch

            if not ctx.device.startswith("cuda"):
                raise SkipCase("nccl backend needs a GPU; none is visible to this rank")
            clash = nccl_identity_clash(world, ctx.device)   # ranks sharing a GPU: own NCCL_HOSTID each
            if clash:
                raise SkipCase(clash)
            from ...comm import nccl as nccl_comm, nccl_enqueue

            device = ctx.device
            bufs = buffers.allocate(case.op, count, n, rank, case.dtype, device, False)
            comm = nccl_enqueue.NcclCall(case.op, bufs, nccl_comm.communicator(ctx), n, rank, case.dtype,
                                         "sum").enqueue
            a, b, c = gemm.make(m, nn, k, case.dtype, device)
            torch.cuda.synchronize()
            pair = overlap.GpuPair(lambda: gemm.run(a, b, c), comm)
        else:
            from ...comm import torch_ops
            from ...comm.process_group import process_group

            process_group(ctx)
            bufs = buffers.allocate(case.op, count, n, rank, case.dtype, "cpu", False)
            comm = torch_ops.make_runner(case.op, bufs, n, rank, False, "sum")
            a, b, c = gemm.make(m, nn, k, case.dtype, "cpu")
            pair = overlap.CpuPair(lambda: gemm.run(a, b, c), comm)
        size_bytes = (metrics.algbw_bytes(case.op, count, elem, n) if case.op in ("all_gather", "reduce_scatter",
                                                                                   "alltoall") else count * elem)
        state = InterferenceState(case=case, world=world, pair=pair, gemm=(a, b, c), bufs=bufs, comm=comm,
                                  count=count, size_bytes=size_bytes, timing_label="overlap")
        # both ops alone and together, timed by the family itself (two streams, one start)
        state.measure = lambda warmup, iters: self.measure_overlap(state, warmup, iters)
        return state

    def run(self, state: InterferenceState) -> None:
        state.comm()   # the state times itself (state.measure); run is the collective alone

    def measure_overlap(self, state: InterferenceState, warmup: int, iters: int) -> list[float]:
        """Per iteration: the together step's wall time; the per-op times go into extra columns."""
        from . import gemm, overlap

        phases = overlap.measure(state.pair, warmup, iters, state.world.barrier)
        import statistics

        med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
        mine = {"gemm_alone_us": med([s.gemm_us for s in phases["gemm"]]),
                "comm_alone_us": med([s.comm_us for s in phases["comm"]]),
                "gemm_together_us": med([s.gemm_us for s in phases["together"]]),
                "comm_together_us": med([s.comm_us for s in phases["together"]])}
        every = state.world.allgather(mine)
        slowest = {key: max(r[key] for r in every) for key in mine}   # as time_us: the slowest rank
        case, n = state.case, state.world.size
        traffic = self.traffic(case, n)
        m, nn, k = (int(case.param(p)) for p in ("gemm_m", "gemm_n", "gemm_k"))
        state.extra.update(
            slowest,
            gemm_slowdown=slowest["gemm_together_us"] / slowest["gemm_alone_us"],
            comm_slowdown=slowest["comm_together_us"] / slowest["comm_alone_us"],
            gemm_tflops_alone=gemm.flops(m, nn, k) / (slowest["gemm_alone_us"] * 1e-6) / 1e12,
            comm_busbw_alone_gbps=metrics.gbps(traffic.algbw_bytes, slowest["comm_alone_us"]) * traffic.bus_factor,
            comm_busbw_together_gbps=(metrics.gbps(traffic.algbw_bytes, slowest["comm_together_us"])
                                      * traffic.bus_factor))
        return [s.wall_us for s in phases["together"]]

    def check(self, state: InterferenceState) -> int:
        """The collective's result and the GEMM's product, each after one more run of both together."""
        from ...comm import buffers
        from . import gemm

        buffers.refill(state.case.op, state.bufs, state.world.rank, False)
        state.gemm[2].zero_()
        state.pair.once("together", state.world.barrier)
        wrong = buffers.count_wrong(state.case.op, "sum", state.bufs, state.world.size, state.world.rank,
                                    state.case.dtype)
        return wrong + gemm.count_wrong(state.gemm[2], int(state.case.param("gemm_k")), state.case.dtype)

    def traffic(self, case: Case, world_size: int) -> Traffic:
        elem = metrics.DTYPE_BYTES[case.dtype]
        count = metrics.element_count(case.op, case.size_bytes, elem, world_size)
        return Traffic(metrics.algbw_bytes(case.op, count, elem, world_size), metrics.bus_factor(case.op, world_size))

    def memory_bytes(self, case: Case, world_size: int):
        """The collective's buffers and check, the GEMM's A, B, C, the index temporaries that build
        them and the cuBLAS workspace, per rank (memory.py); the gloo (CPU) path has none."""
        if case.backend != "nccl":
            return None
        from .memory import interference_plan

        return interference_plan(case, world_size)

    def teardown(self, state: InterferenceState) -> None:
        state.pair.close()
        state.bufs = state.gemm = state.comm = None


FAMILY = Interference()
