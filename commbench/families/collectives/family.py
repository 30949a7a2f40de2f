"""Collectives family: the nccl-tests ops over nccl, gloo and mpi (docs/families/collectives.md)."""
from __future__ import annotations

from dataclasses import dataclass

from ... import dtypes, metrics
from ...comm.context import RankContext
from ...comm.ops import OPS, no_in_place_reason
from ...errors import SkipCase
from ...measure.device import nccl_identity_clash
from ...measure.state import CaseState
from ..base import Case, Family, Param, Traffic

# Several times the L2 of current GPUs (H100/H200 50 MB, B200 126 MB), so a rotated send + receive
# working set never fits in it
ROTATION_SPAN_BYTES = 256 << 20


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
    }

    def impossible(self, case: Case) -> tuple[str, str] | None:
        if case.param("in_place") and no_in_place_reason(case.op):
            return ("params.in_place", no_in_place_reason(case.op))
        if case.backend == "mpi" and case.dtype in ("bfloat16", "float16"):
            return ("dtypes", f"MPI has no {case.dtype} datatype")
        return None

    def needs_gpu_for(self, case: Case) -> bool:
        return case.backend in ("nccl", "torch_nccl")   # gloo and mpi run on host memory

    def setup(self, case: Case, ctx: RankContext) -> CollectiveState:
        from ...comm import buffers

        world = ctx.world
        n, rank = world.size, world.rank
        elem = dtypes.size_bytes(case.dtype)
        count = metrics.element_count(case.op, case.size_bytes, elem, n)
        if count == 0:
            raise SkipCase(f"{case.size_bytes} B is less than one {case.dtype} element per rank on {n} ranks")
        size_bytes = metrics.algbw_bytes(case.op, count, elem, n)   # the bytes really moved
        in_place = bool(case.param("in_place"))
        rop = case.param("reduce_op", "sum")
        stream, native, nccl = None, None, None
        if case.backend in ("nccl", "torch_nccl"):
            import torch

            if not ctx.device.startswith("cuda"):
                raise SkipCase("nccl backend needs a GPU; none is visible to this rank")
            clash = nccl_identity_clash(world, ctx.device)   # ranks sharing a GPU: own NCCL_HOSTID each
            if clash:
                raise SkipCase(clash)
            if case.backend == "nccl":
                from ...comm import nccl as nccl_comm, nccl_enqueue

                nccl_comm.communicator(ctx)   # loads libnccl (or skips the Case without one)
                missing = nccl_enqueue.unavailable(case.op)   # an op newer than this NCCL
                if missing:
                    raise SkipCase(missing)
            device = ctx.device
            # nccl: a stream of its own (non-blocking, as nccl-tests), so ops never serialise with
            # the legacy default stream; torch_nccl: the framework's current stream
            stream = torch.cuda.Stream() if case.backend == "nccl" else torch.cuda.current_stream()
        else:   # mpi: numpy arrays, so a rank with host MPI Cases only never imports torch
            device = buffers.NUMPY if case.backend == "mpi" else "cpu"
        native_loop = case.backend == "nccl" and case.param("timed_loop", "native") == "native"
        span = int(case.param("buffer_span_bytes", ROTATION_SPAN_BYTES)) if native_loop else 0
        bufs = buffers.allocate(case.op, count, n, rank, case.dtype, device, in_place, span)
        if stream is not None:
            import torch

            torch.cuda.synchronize()  # inputs were written on the current stream; ops run on `stream`
        if case.backend == "nccl":
            # one native entry (kernels/nccl_enqueue.cu) for the timed loop, the Python loop and the check
            nccl = nccl_enqueue.NcclCall(case.op, bufs, nccl_comm.communicator(ctx), n, rank, case.dtype, rop)
            runner = nccl.enqueue
            if native_loop:
                from ...measure.native_loop import NativeOp

                native = NativeOp(fn=nccl.native_fn, arg=nccl.arg, describe=nccl.describe, keep=nccl.native_keep)
        elif case.backend == "mpi":
            from ...comm import mpi_data

            if in_place and case.op == "reduce_scatter":
                bufs.result = bufs.send[:count]
            runner = mpi_data.make_runner(case.op, bufs, mpi_data.data_comm(ctx), n, rank, in_place, rop)
        else:
            from ...comm import torch_ops
            from ...comm.process_group import process_group

            process_group(ctx)
            runner = torch_ops.make_runner(case.op, bufs, n, rank, in_place, rop)
        extra = {"reduce_op": rop if OPS[case.op].reduces else ""}
        if native_loop:
            extra["buffer_rotations"] = bufs.steps
        if nccl is not None and OPS[case.op].nccl_fallback:   # which of the op's two forms ran
            extra["nccl_call"] = nccl.what
        if case.backend in ("torch_nccl", "gloo") and not in_place and OPS[case.op].torch_local_copy:
            extra["includes_local_copy"] = True
        return CollectiveState(case.op, case.backend, case.dtype, rop, in_place, bufs, runner, rank, n, nccl,
                               count=count, size_bytes=size_bytes, stream=stream, extra=extra, native=native)

    def run(self, state: CollectiveState) -> None:
        state.runner()

    def check(self, state: CollectiveState) -> int:
        from ...comm import buffers

        buffers.refill(state.op, state.bufs, state.rank, state.in_place)
        if state.stream is None:
            state.runner()
        else:
            import torch

            torch.cuda.synchronize()  # the refill ran on the current stream
            if state.nccl is not None:   # the native entry the timed loop called, on the head slice
                state.nccl.check_once(state.stream.cuda_stream)
            else:
                with torch.cuda.stream(state.stream):
                    state.runner()
            state.stream.synchronize()
        return buffers.count_wrong(state.op, state.reduce_op, state.bufs, state.n, state.rank, state.dtype)

    def traffic(self, case: Case, world_size: int) -> Traffic:
        elem = dtypes.size_bytes(case.dtype)
        count = metrics.element_count(case.op, case.size_bytes, elem, world_size)
        return Traffic(metrics.algbw_bytes(case.op, count, elem, world_size),
                       metrics.bus_factor(case.op, world_size))

    def teardown(self, state: CollectiveState) -> None:
        state.bufs = None
        state.runner = None
        state.nccl = None


FAMILY = Collectives()
