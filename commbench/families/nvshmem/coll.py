"""NVSHMEM collectives on TEAM_WORLD with nccl-tests' size semantics and checks.

Sizes follow docs/metrics.md: all_reduce/broadcast whole buffer, all_gather and
reduce_scatter the whole (output / input) buffer, alltoall the per-rank send
buffer. Data comes from commbench.comm.pattern, so NVSHMEM and NCCL rows
are checked against the same values.
"""
from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass

from ... import dtypes, metrics
from ...measure.state import CaseState
from ...comm import pattern
from ...errors import SkipCase
from . import buffers

REDUCE_SCRATCH_DEFAULT_BYTES = 512 * 1024   # NVSHMEM_REDUCE_SCRATCH_SIZE's default
OP_CODES = {"all_reduce": 0, "all_gather": 1, "alltoall": 2, "broadcast": 3, "reduce_scatter": 4}
DTYPE_CODES = {"float32": 0, "bfloat16": 1, "float16": 2, "int32": 3}


@dataclass
class CollState(CaseState):
    lib: object
    world: object
    device: str
    op: str
    backend: str
    dtype: str
    n: int
    rank: int
    nvshmem_count: int  # elements per NVSHMEM call (per-PE block for gather/alltoall/scatter)
    src: object
    dst: object
    threads: int
    case: object = None


def buffer_counts(op: str, count: int, n: int) -> tuple[int, int, int]:
    """(src elements, dst elements, NVSHMEM count) for nccl-tests' ``count``."""
    if op == "all_gather":
        return count, count * n, count
    if op == "reduce_scatter":
        return count * n, count, count
    if op == "alltoall":  # count is per peer: n blocks in, n blocks out
        return count * n, count * n, count
    return count, count, count


def reduce_scratch_bytes(env: dict[str, str]) -> int:
    """NVSHMEM_REDUCE_SCRATCH_SIZE as NVSHMEM reads it (bytes, optional K/M/G/T suffix)."""
    raw = env.get("NVSHMEM_REDUCE_SCRATCH_SIZE", "").strip()
    m = re.fullmatch(r"(\d+)\s*([kKmMgGtT]?)[bB]?", raw)
    if not m:
        return REDUCE_SCRATCH_DEFAULT_BYTES
    return int(m.group(1)) * 1024 ** " kmgt".index((m.group(2) or " ").lower())


def device_reduce_scatter_problem(nv_count: int, elem_bytes: int, n_pes: int,
                                  env: dict[str, str]) -> str | None:
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


def source_values(op: str, rank: int, n_src: int, device: str, dtype: str):
    import torch

    idx = torch.arange(n_src, device=device, dtype=torch.int64)
    return pattern.values(rank, idx).to(dtypes.torch_dtype(dtype))


def setup(case, ctx, handle, prm: dict) -> CollState:
    import torch

    if handle.limited_mpg and not prm["allow_limited_mpg"]:
        raise SkipCase("NVSHMEM collectives need team barriers, which limited MPG (several PEs on "
                       "one GPU without MPS) does not support; run one PE per GPU or under MPS")
    lib = handle.load("nvshmem_coll", "cb_coll_attach")
    _declare(lib)
    n, elem = handle.n_pes, dtypes.size_bytes(case.dtype)
    count = metrics.element_count(case.op, case.size_bytes, elem, n)
    n_src, n_dst, nv_count = buffer_counts(case.op, count, n)
    if case.op == "reduce_scatter" and case.backend == "nvshmem":
        reason = device_reduce_scatter_problem(nv_count, elem, n, dict(os.environ))
        if reason:
            raise SkipCase(reason)
    src_ptr = handle.buffer("coll_src", n_src * elem)
    dst_ptr = handle.buffer("coll_dst", n_dst * elem)
    stream = torch.cuda.Stream(device=ctx.device)
    with torch.cuda.stream(stream):
        src = buffers.view(src_ptr, n_src * elem, case.dtype, ctx.device)
        dst = buffers.view(dst_ptr, n_dst * elem, case.dtype, ctx.device)
        src.copy_(source_values(case.op, handle.pe, n_src, ctx.device, case.dtype))
        dst.zero_()
    stream.synchronize()
    ctx.world.barrier()
    return CollState(lib, ctx.world, ctx.device, case.op, case.backend, case.dtype, n, handle.pe, nv_count,
                     src, dst, min(prm["threads"], 256), case=case, stream=stream, count=count)


def run(st: CollState) -> None:
    import torch

    stream = torch.cuda.current_stream().cuda_stream  # the runner's timing (or capture) stream
    args = (OP_CODES[st.op], DTYPE_CODES[st.dtype], st.dst.data_ptr(), st.src.data_ptr(), st.nvshmem_count)
    if st.backend == "nvshmem_host":
        rc = st.lib.cb_coll_host(*args, stream)
    else:
        rc = st.lib.cb_coll_device(*args, st.threads, stream)
    if rc != 0:
        raise RuntimeError(f"{st.op} ({st.backend}): NVSHMEM returned {rc}")


def expected(st: CollState):
    """What this PE's destination must hold."""
    import torch

    dev, n, c = st.device, st.n, st.nvshmem_count
    if st.op == "all_reduce":
        idx = torch.arange(st.count, device=dev, dtype=torch.int64)
        return pattern.reduce_expected("sum", n, idx)
    if st.op == "reduce_scatter":
        idx = torch.arange(c, device=dev, dtype=torch.int64) + st.rank * c
        return pattern.reduce_expected("sum", n, idx)
    if st.op == "broadcast":
        return pattern.values(0, torch.arange(st.count, device=dev, dtype=torch.int64))
    if st.op == "all_gather":
        return torch.cat([pattern.values(r, torch.arange(c, device=dev, dtype=torch.int64)) for r in range(n)])
    # alltoall: block r of our output is block `rank` of PE r's input
    idx = torch.arange(c, device=dev, dtype=torch.int64) + st.rank * c
    return torch.cat([pattern.values(r, idx) for r in range(n)])


def check(st: CollState) -> int:
    import torch

    torch.cuda.synchronize()
    st.world.barrier()
    want = expected(st).double()
    got = st.dst.double()
    tol = pattern.tolerance(st.dtype, float(want.abs().max().item()) if want.numel() else 0.0)
    if tol == 0.0:
        return int((got != want).sum().item())
    return int(((got - want).abs() > tol * want.abs()).sum().item())
