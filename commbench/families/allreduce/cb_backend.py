"""commbench's own one-shot / two-shot kernels (kernels/allreduce.cu) over peer memory."""
from __future__ import annotations

import ctypes

from ... import jit
from ...comm.process_group import symm_group_name
from ...errors import SkipCase
from . import data, peers
from .state import ArState

ALGO_IDS = {"cb_one_shot": 0, "cb_two_shot": 1}
DTYPE_IDS = {"float32": 0, "bfloat16": 1}
VEC_BYTES = 16
ALIGN_BYTES = 256


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def layout(size_bytes: int, world_size: int, flag_bytes: int) -> dict[str, int]:
    """Byte offsets inside one rank's peer-visible allocation.

    The input is padded with zeros to whole 16-byte vectors, and to a multiple
    of world_size vectors so two-shot chunks are equal; padding adds nothing
    to the sums and the check reads only the real elements.
    """
    num_vecs = _round_up(max(size_bytes, 1), VEC_BYTES * world_size) // VEC_BYTES
    input_off = _round_up(flag_bytes, ALIGN_BYTES)
    scratch_off = _round_up(input_off + num_vecs * VEC_BYTES, ALIGN_BYTES)
    total = scratch_off + num_vecs // world_size * VEC_BYTES
    return {"num_vecs": num_vecs, "input": input_off, "scratch": scratch_off, "total": total}


def setup(case, ctx) -> ArState:
    import torch

    world = ctx.world
    lib = jit.load("allreduce")
    lib.cb_allreduce_flag_bytes.restype = ctypes.c_size_t
    lib.cb_allreduce_launch.argtypes = [
        ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    if world.size > lib.cb_allreduce_max_ranks():
        raise SkipCase(f"{case.backend} supports at most {lib.cb_allreduce_max_ranks()} ranks")
    if world.num_nodes > 1:
        raise SkipCase(f"{case.backend} needs peer pointers: all ranks on one node")
    num_ctas = int(case.param("num_ctas", 32))
    threads = int(case.param("threads_per_cta", 512))
    if not 1 <= num_ctas <= lib.cb_allreduce_max_blocks():
        raise SkipCase(f"num_ctas must be 1..{lib.cb_allreduce_max_blocks()}, got {num_ctas}")
    count = case.size_bytes // data.ELEMENT_BYTES[case.dtype]
    lay = layout(count * data.ELEMENT_BYTES[case.dtype], world.size, lib.cb_allreduce_flag_bytes())
    provider = case.param("peer_memory", "ipc")
    group = symm_group_name(ctx) if provider == "torch_symm" else None
    region = peers.open_region(provider, lay["total"], ctx, group)
    padded_bytes = lay["num_vecs"] * VEC_BYTES
    out = torch.empty(padded_bytes, dtype=torch.uint8, device=ctx.device).view(data.torch_dtype(case.dtype))
    own = region.ptrs[world.rank]
    inp = data.view(own + lay["input"], count, case.dtype, ctx.device)

    ptr_array = ctypes.c_void_p * world.size
    inputs = ptr_array(*[p + lay["input"] for p in region.ptrs])
    scratch = ptr_array(*[p + lay["scratch"] for p in region.ptrs])
    flags = ptr_array(*region.ptrs)
    stream = torch.cuda.Stream(device=ctx.device)
    algo, dtype_id = ALGO_IDS[case.backend], DTYPE_IDS[case.dtype]
    keep = (inputs, scratch, flags)  # ctypes arrays must outlive every launch

    def enqueue() -> None:
        err = lib.cb_allreduce_launch(algo, dtype_id, keep[0], keep[1], keep[2], out.data_ptr(),
                                      world.rank, world.size, lay["num_vecs"], num_ctas, threads,
                                      stream.cuda_stream)
        if err != 0:
            raise RuntimeError(f"cb_allreduce_launch failed with cudaError {err}")

    native = _native_op(lib, algo, dtype_id, keep, out.data_ptr(), world.rank, world.size, lay["num_vecs"],
                        num_ctas, threads)

    def refill() -> None:
        data.fill_input(inp, world.rank)

    refill()
    torch.cuda.synchronize()
    world.comm.Barrier()
    state = ArState(
        stream=stream, extra={"peer_memory": provider, "reduced_bytes": padded_bytes},
        world=world, dtype=case.dtype, count=count, enqueue=enqueue, refill=refill,
        output=lambda: out, clear=lambda: out.fill_(-1), native=native)
    state.closers.append(region.close)
    state.closers.append(torch.cuda.synchronize)
    return state


class _Op(ctypes.Structure):  # struct cb_allreduce_op (kernels/allreduce.cu)
    _fields_ = [("algo", ctypes.c_int), ("dtype", ctypes.c_int), ("inputs", ctypes.c_void_p),
                ("scratch", ctypes.c_void_p), ("flags", ctypes.c_void_p), ("out", ctypes.c_void_p),
                ("rank", ctypes.c_int), ("nranks", ctypes.c_int), ("num_vecs", ctypes.c_size_t),
                ("max_blocks", ctypes.c_int), ("threads", ctypes.c_int)]


def _native_op(lib, algo, dtype_id, keep, out_ptr, rank, nranks, num_vecs, num_ctas, threads):
    """The same launch as ``enqueue``, for the native timed loop (Python entered once per batch)."""
    from ...measure.native_loop import NativeOp

    spec = _Op(algo, dtype_id, ctypes.addressof(keep[0]), ctypes.addressof(keep[1]), ctypes.addressof(keep[2]),
               out_ptr, rank, nranks, num_vecs, num_ctas, threads)
    return NativeOp(fn=ctypes.cast(lib.cb_allreduce_enqueue, ctypes.c_void_p).value, arg=ctypes.addressof(spec),
                    describe=lambda code: f"cb_allreduce_launch returned cudaError {code}", keep=(spec, keep))
