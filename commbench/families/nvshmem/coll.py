"""NVSHMEM collectives on TEAM_WORLD with nccl-tests' size semantics and checks.

Sizes follow docs/metrics.md: all_reduce/broadcast whole buffer, all_gather and
reduce_scatter the whole (output / input) buffer, alltoall the per-rank send
buffer. Data comes from commbench.comm.pattern, so NVSHMEM and NCCL rows
are checked against the same values. What differs between collectives is their row in
``ops.py`` (op code, per-PE blocks, expected output); ``CALLS`` holds one line per native entry.
"""
from __future__ import annotations

import ctypes
import os
import re
from typing import Mapping

from ... import dtypes, metrics
from ...comm import pattern
from ...errors import SkipCase
from . import buffers
from .state import BACKENDS, INITIATORS, CollState, Pe

REDUCE_SCRATCH_DEFAULT_BYTES = 512 * 1024   # NVSHMEM_REDUCE_SCRATCH_SIZE's default
DTYPE_CODES = {"float32": 0, "bfloat16": 1, "float16": 2, "int32": 3}
CALLS = {   # native entry (kernels/nvshmem_coll.cu) -> one launch; args = (op, dtype, dst, src, count)
    "cb_coll_host": lambda st, args, s: st.pe.lib.cb_coll_host(*args, s),
    "cb_coll_device": lambda st, args, s: st.pe.lib.cb_coll_device(*args, st.threads, s),
}


def buffer_counts(op, count: int, n: int) -> tuple[int, int, int]:
    """(src elements, dst elements, NVSHMEM count) for nccl-tests' ``count``: a side that holds
    one block per PE (``op.blocks``) has n of them."""
    return (count * n if "in" in op.blocks else count, count * n if "out" in op.blocks else count, count)


def reduce_scratch_bytes(env: Mapping[str, str]) -> int:
    """NVSHMEM_REDUCE_SCRATCH_SIZE as NVSHMEM reads it (bytes, optional K/M/G/T suffix)."""
    raw = env.get("NVSHMEM_REDUCE_SCRATCH_SIZE", "").strip()
    m = re.fullmatch(r"(\d+)\s*([kKmMgGtT]?)[bB]?", raw)
    if not m:
        return REDUCE_SCRATCH_DEFAULT_BYTES
    return int(m.group(1)) * 1024 ** " kmgt".index((m.group(2) or " ").lower())


def device_reduce_scatter_problem(nv_count: int, elem_bytes: int, n_pes: int,
                                  env: Mapping[str, str]) -> str | None:
    """NVSHMEM's device reduce-scatter asserts (killing the rank) beyond half its scratch."""
    need = nv_count * elem_bytes * n_pes
    scratch = reduce_scratch_bytes(env)
    if n_pes > 1 and need > scratch // 2:
        return (f"device-initiated reduce_scatter of {need} B needs NVSHMEM_REDUCE_SCRATCH_SIZE "
                f">= {2 * need} B (it is {scratch} B); NVSHMEM asserts beyond half of it")
    return None


def _declare(lib) -> None:
    vp, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    lib.cb_coll_host.argtypes = [i, i, vp, vp, sz, vp]
    lib.cb_coll_device.argtypes = [i, i, vp, vp, sz, i, vp]


def setup(case, ctx, handle, prm: dict, op) -> CollState:
    import torch

    if handle.limited_mpg and not prm["allow_limited_mpg"]:
        raise SkipCase("NVSHMEM collectives need team barriers, which limited MPG (several PEs on "
                       "one GPU without MPS) does not support; run one PE per GPU or under MPS")
    lib = handle.load("nvshmem_coll", "cb_coll_attach")
    _declare(lib)
    initiator = INITIATORS[case.backend]
    n, elem = handle.n_pes, dtypes.size_bytes(case.dtype)
    count = metrics.element_count(op.name, case.size_bytes, elem, n)
    n_src, n_dst, nv_count = buffer_counts(op, count, n)
    if op.device_scratch and initiator == "device":
        reason = device_reduce_scatter_problem(nv_count, elem, n, os.environ)
        if reason:
            raise SkipCase(reason)
    src_ptr = handle.buffer("coll_src", n_src * elem)
    dst_ptr = handle.buffer("coll_dst", n_dst * elem)
    stream = torch.cuda.Stream(device=ctx.device)
    with torch.cuda.stream(stream):
        src = buffers.view(src_ptr, n_src * elem, case.dtype, ctx.device)
        dst = buffers.view(dst_ptr, n_dst * elem, case.dtype, ctx.device)
        buffers.fill(src, lambda a, b: pattern.values(handle.pe, buffers.index(a, b, ctx.device)))
        dst.zero_()
    stream.synchronize()
    ctx.world.barrier()
    return CollState(op=op, initiator=initiator, pe=Pe(handle, lib, ctx.world, ctx.device), dtype=case.dtype,
                     nvshmem_count=nv_count, src=src, dst=dst, threads=min(prm["threads"], 256), stream=stream,
                     count=count)


def run(st: CollState) -> None:
    import torch

    stream = torch.cuda.current_stream().cuda_stream  # the runner's timing (or capture) stream
    args = (st.op.code, DTYPE_CODES[st.dtype], st.dst.data_ptr(), st.src.data_ptr(), st.nvshmem_count)
    rc = CALLS[st.op.entries[st.initiator]](st, args, stream)
    if rc != 0:
        raise RuntimeError(f"{st.op.name} ({BACKENDS[st.initiator]}): NVSHMEM returned {rc}")


# --- what this PE's destination must hold at positions [start, stop) (a row names one) ------------
def _at(st: CollState, start: int, stop: int):
    return buffers.index(start, stop, st.pe.device)


def expect_all_reduce(st: CollState, start: int, stop: int):
    return pattern.reduce_expected("sum", st.pe.handle.n_pes, _at(st, start, stop))


def expect_reduce_scatter(st: CollState, start: int, stop: int):
    c = st.nvshmem_count
    return pattern.reduce_expected("sum", st.pe.handle.n_pes, _at(st, start, stop).add_(st.pe.handle.pe * c))


def expect_broadcast(st: CollState, start: int, stop: int):
    return pattern.values(0, _at(st, start, stop))


def expect_all_gather(st: CollState, start: int, stop: int):
    """Block r of our output is PE r's input."""
    j = _at(st, start, stop)
    r = j // st.nvshmem_count
    return pattern.values(r, j.sub_(r * st.nvshmem_count))


def expect_alltoall(st: CollState, start: int, stop: int):
    """Block r of our output is block `rank` of PE r's input."""
    c, j = st.nvshmem_count, _at(st, start, stop)
    r = j // c
    return pattern.values(r, j.sub_(r * c).add_(st.pe.handle.pe * c))


def check(st: CollState) -> int:
    """Elements of the destination beyond the pattern's tolerance, chunk by chunk (buffers.py)."""
    import torch

    torch.cuda.synchronize()
    st.pe.world.barrier()
    return buffers.count_within(st.dst, lambda a, b: st.op.expect(st, a, b), st.dtype)
