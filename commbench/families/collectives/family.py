"""Collectives family: the nccl-tests ops over nccl, gloo and mpi (docs/families/collectives.md)."""
from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes, metrics
from ...comm import nccl_algos
from ...comm.context import RankContext
from ...comm.ops import OPS, no_in_place_reason
from ...comm.traffic import FILE_SUFFIXES, spec_problem
from ...errors import SkipCase
from ...measure.device import nccl_identity_clash
from ...measure.state import CaseState
from ..base import Case, Family, Param, Traffic
from . import bitwise_hooks
from .bitwise_hooks import run_once

# Several times the L2 of current GPUs (H100/H200 50 MB, B200 126 MB), so a rotated send + receive
# working set never fits in it
ROTATION_SPAN_BYTES = 256 << 20
MAX_OFFSET_BYTES = 4096


@dataclass
class CollectiveState(CaseState):
    op: str
    backend: str
    dtype: str
    reduce_op: str
    in_place: bool
    bufs: object
    runner: object
    rank: int
    n: int
    nccl: object = None   # nccl backend: the comm.nccl_enqueue.NcclCall that runner, the timed loop and check use
    registration: object = None   # register != none: comm.registration.Registration (freed at teardown)


class Collectives(Family):
    name = "collectives"
    summary = "NCCL/gloo/MPI collectives with nccl-tests' algbw and busbw"
    ops = tuple(OPS)
    backends = ("nccl", "torch_nccl", "gloo", "mpi")
    dtypes = ("float32", "bfloat16", "float16", "int32")
    default_dtype = "float32"
    needs_gpu = True
    params = {
        "in_place": Param(False, (bool,), "in-place (output aliases input, as nccl-tests) or out-of-place"),
        "reduce_op": Param("sum", (str,), "reduction for all_reduce, reduce_scatter, reduce",
                           choices=("sum", "max", "min")),
        "timed_loop": Param("native", (str,), "nccl backend: enqueue the timed batch from native code "
                            "(as nccl-tests) or from Python, one interpreter call per op",
                            choices=("native", "python")),
        "buffer_span_bytes": Param(ROTATION_SPAN_BYTES, (int,), "nccl backend, native loop: consecutive "
                                   "iterations use the buffers at offsets rotating through this many bytes "
                                   "(as nccl-tests shifts them within its largest buffer), so no iteration "
                                   "reads the previous one's data from L2; 0 reuses one buffer (cache-hot)",
                                   range=(0, 1 << 40)),
        "register": Param("none", (str,), "nccl backend: buffers from ncclMemAlloc registered with NCCL, "
                          "user (ncclCommRegister) or window (ncclCommWindowRegister, symmetric, NCCL >= 2.27); "
                          "a refusal skips the Case with NCCL's reason (the `registered` column)",
                          choices=("none", "user", "window")),
        "offset_bytes": Param(0, (int,), "every send and receive buffer starts this many bytes past its "
                              "allocation's alignment (nccl-tests -u; a multiple of the element size)",
                              range=(0, MAX_OFFSET_BYTES)),
        "traffic": Param("uniform", (str,), "alltoallv: uniform, zipf:S, hot_rank:R[:F], spread:S or a "
                         ".csv/.json byte matrix (row = sender; a relative path is taken from the suite file's "
                         "folder); other ops ignore it", check=spec_problem, file_suffixes=FILE_SUFFIXES),
        "rank_time": Param("max", (str,), "how the ranks' times of one iteration reduce to the row's time "
                           "(nccl-tests -a): the slowest rank, their mean, the fastest, or rank 0's",
                           choices=tuple(metrics.RANK_TIMES)),
    }

    def impossible(self, case: Case) -> tuple[str, str] | None:
        if case.param("in_place") and no_in_place_reason(case.op):
            return ("params.in_place", no_in_place_reason(case.op))
        if case.backend == "mpi" and case.dtype in ("bfloat16", "float16"):
            return ("dtypes", f"MPI has no {case.dtype} datatype")
        if case.param("register", "none") != "none" and case.backend != "nccl":
            return ("params.register", "buffer registration is the nccl backend's (libnccl called directly)")
        if case.op == "alltoallv" and case.backend != "nccl":
            return ("backends", "alltoallv runs on the nccl backend only (grouped ncclSend/ncclRecv)")
        offset = case.param("offset_bytes", 0)
        if isinstance(offset, int) and offset % dtypes.size_bytes(case.dtype):
            return ("params.offset_bytes", f"offset_bytes {offset} is not a multiple of the "
                    f"{dtypes.size_bytes(case.dtype)}-byte {case.dtype} element (NCCL needs element-aligned buffers)")
        return None

    def machine_reason(self, case: Case) -> str | None:
        # an NCCL_ALGO / NCCL_PROTO that leaves NCCL no algorithm for the op (comm/nccl_algos.py):
        # skipped with the reason rather than failed by NCCL's "invalid usage"; multicast (NVLS)
        # is always held off for this family
        if case.backend not in ("nccl", "torch_nccl"):
            return None
        return nccl_algos.case_refusal(case.op, case.env, ranks=case.ranks, ranks_per_node=case.ranks_per_node,
                                       multicast=False, dtype=case.dtype, reduce_op=case.param("reduce_op", "sum"))

    def needs_gpu_for(self, case: Case) -> bool:
        return case.backend in ("nccl", "torch_nccl")   # gloo and mpi run on host memory

    def setup(self, case: Case, ctx: RankContext) -> CollectiveState:
        world = ctx.world
        n, rank = world.size, world.rank
        layout, count, size_bytes = shape(case, n, rank)
        in_place = bool(case.param("in_place"))
        rop = case.param("reduce_op", "sum")
        device, stream = _device_and_stream(case, ctx)
        native_loop = case.backend == "nccl" and case.param("timed_loop", "native") == "native"
        bufs, registration = _allocate(case, ctx, device, layout, count, in_place, native_loop)
        if stream is not None:
            import torch

            torch.cuda.synchronize()  # inputs were written on the current stream; ops run on `stream`
        runner, nccl, native = _runner(case, ctx, bufs, count, in_place, rop, native_loop)
        extra = {"reduce_op": rop if OPS[case.op].reduces else ""}
        if case.backend == "nccl":
            extra["registered"] = case.param("register", "none")   # what NCCL accepted (a refusal is a skipped row)
        if native_loop:
            extra["buffer_rotations"] = bufs.steps
        if nccl is not None and OPS[case.op].nccl_fallback:   # which of the op's two forms ran
            extra["nccl_call"] = nccl.what
        if case.backend in ("torch_nccl", "gloo") and not in_place and OPS[case.op].torch_local_copy:
            extra["includes_local_copy"] = True
        state = CollectiveState(case.op, case.backend, case.dtype, rop, in_place, bufs, runner, rank, n, nccl,
                                registration, count=count, size_bytes=size_bytes, stream=stream, extra=extra,
                                native=native)
        state.bitwise = bitwise_hooks.hooks(state)   # check: bitwise (measure/bitwise.py)
        return state

    def run(self, state: CollectiveState) -> None:
        state.runner()

    def check(self, state: CollectiveState) -> int:
        from ...comm import alltoallv, buffers

        run_once(state)
        if state.bufs.layout is not None:
            return alltoallv.count_wrong(state.bufs, state.dtype)
        return buffers.count_wrong(state.op, state.reduce_op, state.bufs, state.n, state.rank, state.dtype)

    def memory_bytes(self, case: Case, world_size: int):
        """GPU buffers per rank (memory.py); host backends carry none."""
        if case.backend not in ("nccl", "torch_nccl"):
            return None
        from ...measure.collective_memory import collective_plan

        native = case.backend == "nccl" and case.param("timed_loop", "native") == "native"
        span = int(case.param("buffer_span_bytes", ROTATION_SPAN_BYTES)) if native else 0
        return collective_plan(case, world_size, span)

    def traffic(self, case: Case, world_size: int) -> Traffic:
        elem = dtypes.size_bytes(case.dtype)
        if case.op == "alltoallv":   # the busiest rank's larger side, as nccl-tests' alltoallv
            return Traffic(_busiest_elements(case, world_size) * elem, metrics.bus_factor(case.op, world_size))
        count = metrics.element_count(case.op, case.size_bytes, elem, world_size)
        return Traffic(metrics.algbw_bytes(case.op, count, elem, world_size),
                       metrics.bus_factor(case.op, world_size))

    def teardown(self, state: CollectiveState) -> None:
        state.bufs = None
        state.runner = None
        state.nccl = None
        if state.registration is not None:   # deregister and free once nothing uses the buffers
            import torch

            torch.cuda.synchronize()
            state.registration.close()
            state.registration = None


def shape(case: Case, n: int, rank: int):
    """(alltoallv's Layout of this rank or None, count, size_bytes): the row's count and the bytes
    really moved. alltoallv: both are the busiest rank's larger side (what it sends or receives),
    the same on every rank, so a rank that only receives (or neither) takes part like any other."""
    elem = dtypes.size_bytes(case.dtype)
    layout = alltoallv_layout(case, n, rank) if case.op == "alltoallv" else None
    count = layout.busiest if layout else metrics.element_count(case.op, case.size_bytes, elem, n)
    if count == 0:
        raise SkipCase(f"{case.size_bytes} B is less than one {case.dtype} element per rank on {n} ranks")
    return layout, count, count * elem if layout else metrics.algbw_bytes(case.op, count, elem, n)


# (case_id, ranks, busiest elements) of the last alltoallv Case this process set up: rank 0 computes
# the row's bandwidth after measuring from the matrix its guarded set-up read, never from a second
# read of a traffic file (which may have changed or gone since).
_set_up_busiest: tuple[str, int, int] | None = None


def alltoallv_layout(case: Case, n: int, rank: int):
    """This rank's comm.traffic.Layout of the Case's matrix, read once here, in the guarded set-up:
    a hot rank or a matrix that n ranks cannot have skips the Case, a file that is gone or
    malformed fails it, each row with the reason."""
    global _set_up_busiest
    from ...comm import traffic

    spec = case.param("traffic", "uniform")
    try:
        matrix = traffic.counts(spec, n, case.size_bytes, dtypes.size_bytes(case.dtype))
    except traffic.TooFewRanks as exc:
        raise SkipCase(f"traffic {spec}: {exc}") from None
    except traffic.TrafficError as exc:
        raise traffic.TrafficError(f"traffic {spec}: {exc}") from None
    layout = traffic.Layout(matrix, rank)
    _set_up_busiest = (case.case_id, n, layout.busiest)
    return layout


def _busiest_elements(case: Case, n: int) -> int:
    if _set_up_busiest is not None and _set_up_busiest[:2] == (case.case_id, n):
        return _set_up_busiest[2]
    from ...comm import traffic   # no set-up in this process (a plan, a test): the matrix itself

    return traffic.algbw_elements(traffic.counts(case.param("traffic", "uniform"), n, case.size_bytes,
                                                 dtypes.size_bytes(case.dtype)))


FAMILY = Collectives()


def _device_and_stream(case: Case, ctx: RankContext):
    """(where the buffers live, the stream the op runs on: None for host backends). Skips the Case
    where its backend cannot run on this rank (no GPU, a GPU shared without its own NCCL host id,
    no NCCL library, an op newer than this NCCL)."""
    from ...comm import buffers

    if case.backend not in ("nccl", "torch_nccl"):   # mpi: numpy arrays (a rank with host MPI Cases
        return (buffers.NUMPY if case.backend == "mpi" else "cpu"), None   # only never imports torch)
    import torch

    if not ctx.device.startswith("cuda"):
        raise SkipCase("nccl backend needs a GPU; none is visible to this rank")
    clash = nccl_identity_clash(ctx.world, ctx.device)   # ranks sharing a GPU: own NCCL_HOSTID each
    if clash:
        raise SkipCase(clash)
    if case.backend == "nccl":
        from ...comm import nccl as nccl_comm, nccl_enqueue

        nccl_comm.communicator(ctx)   # loads libnccl (or skips the Case without one)
        missing = nccl_enqueue.unavailable(case.op)   # an op newer than this NCCL
        if missing:
            raise SkipCase(missing)
    # nccl: a stream of its own (non-blocking, as nccl-tests), so ops never serialise with the legacy
    # default stream; torch_nccl: the framework's current stream
    return ctx.device, (torch.cuda.Stream() if case.backend == "nccl" else torch.cuda.current_stream())


def _allocate(case: Case, ctx: RankContext, device, layout, count: int, in_place: bool, native_loop: bool):
    """(the Case's buffers, their NCCL registration or None); a refused registration skips the Case
    with its memory released."""
    from ...comm import buffers

    n, rank = ctx.world.size, ctx.world.rank
    span = int(case.param("buffer_span_bytes", ROTATION_SPAN_BYTES)) if native_loop else 0
    offset = int(case.param("offset_bytes", 0))
    registration, alloc = None, None
    register = case.param("register", "none")
    if case.backend == "nccl" and register != "none":
        from ...comm import nccl as nccl_comm
        from ...comm.registration import Registration

        registration = Registration(register, nccl_comm.communicator(ctx), device)
        alloc = registration.alloc_bytes
    try:
        if layout is not None:
            from ...comm import alltoallv

            bufs = alltoallv.allocate(layout, rank, case.dtype, device, span, offset, alloc)
        else:
            bufs = buffers.allocate(case.op, count, n, rank, case.dtype, device, in_place, span, offset, alloc)
        if registration is not None:
            import torch

            torch.cuda.synchronize()
            registration.register(bufs.allocations)   # SkipCase (memory released) on a refusal
    except BaseException:
        if registration is not None:
            registration.close()
        raise
    return bufs, registration


def _runner(case: Case, ctx: RankContext, bufs, count: int, in_place: bool, rop: str, native_loop: bool):
    """(what enqueues one op, the NCCL call or None, the native timed loop's entry or None)."""
    n, rank = ctx.world.size, ctx.world.rank
    if case.backend == "nccl":
        from ...comm import nccl as nccl_comm, nccl_enqueue

        # one native entry (kernels/nccl_enqueue.cu) for the timed loop, the Python loop and the check
        nccl = nccl_enqueue.NcclCall(case.op, bufs, nccl_comm.communicator(ctx), n, rank, case.dtype, rop)
        native = None
        if native_loop:
            from ...measure.native_loop import NativeOp

            native = NativeOp(fn=nccl.native_fn, arg=nccl.arg, describe=nccl.describe, keep=nccl.native_keep)
        return nccl.enqueue, nccl, native
    if case.backend == "mpi":
        from ...comm import mpi_data

        if in_place and case.op == "reduce_scatter":
            bufs.result = bufs.send[:count]
        return mpi_data.make_runner(case.op, bufs, mpi_data.data_comm(ctx), n, rank, in_place, rop), None, None
    from ...comm import torch_ops
    from ...comm.process_group import process_group

    process_group(ctx)
    return torch_ops.make_runner(case.op, bufs, n, rank, in_place, rop), None, None
