"""Buffers for one collective Case, filled with the verifiable pattern, and the check.

Everything is torch (CUDA tensors for nccl, CPU tensors for gloo and mpi; mpi4py
reads CPU tensors through their numpy views). Fill and check work in chunks so
an 8 GiB buffer never needs an 8 GiB index array.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import pattern

CHUNK = 1 << 26  # elements per fill/check step


def torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
            "int32": torch.int32, "float64": torch.float64}[name]


@dataclass
class Buffers:
    send: object
    recv: object
    result: object  # the view the op's output lands in (what check reads)
    count: int
    extra: dict = field(default_factory=dict)


def _fill(buf, rank: int, offset: int = 0) -> None:
    import torch

    n = buf.numel()
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        idx = torch.arange(start + offset, stop + offset, device=buf.device, dtype=torch.int64)
        buf[start:stop] = pattern.values(rank, idx).to(buf.dtype)


def allocate(op: str, count: int, n: int, rank: int, dtype: str, device: str, in_place: bool) -> Buffers:
    """Allocate and fill send/recv for ``op`` with nccl-tests' in-place aliasing."""
    import torch

    td = torch_dtype(dtype)
    new = lambda k: torch.empty(k, dtype=td, device=device)  # noqa: E731
    if op == "all_gather":
        recv = new(count * n)
        recv.fill_(0)
        send = recv[rank * count:(rank + 1) * count] if in_place else new(count)
        _fill(send, rank)
        return Buffers(send, recv, recv, count)
    if op in ("reduce_scatter", "alltoall"):
        send = new(count * n)
        _fill(send, rank)
        if op == "reduce_scatter" and in_place:
            recv = send[rank * count:(rank + 1) * count]
        else:
            recv = new(count * (n if op == "alltoall" else 1))
            recv.fill_(0)
        return Buffers(send, recv, recv, count)
    send = new(count)
    _fill(send, rank)
    recv = send if in_place else new(count)
    if not in_place:
        recv.fill_(0)
    return Buffers(send, recv, recv, count)


def refill(op: str, bufs: Buffers, rank: int, in_place: bool) -> None:
    """Restore inputs before the check (timed in-place iterations overwrote them)."""
    if not in_place or op == "all_gather":
        bufs.recv.fill_(0)
    _fill(bufs.send, rank)


def expected_chunk(op: str, reduce_op: str, n: int, rank: int, count: int, start: int, stop: int, device):
    """Expected values of result positions [start, stop) on ``rank``; None if unchecked there."""
    import torch

    j = torch.arange(start, stop, device=device, dtype=torch.int64)
    if op == "all_reduce":
        return pattern.reduce_expected(reduce_op, n, j)
    if op == "all_gather":
        return pattern.values(j // count, j % count)
    if op == "reduce_scatter":
        return pattern.reduce_expected(reduce_op, n, rank * count + j)
    if op == "alltoall":
        return pattern.values(j // count, rank * count + j % count)
    if op == "broadcast":
        return pattern.values(0, j)
    if op == "reduce":
        return pattern.reduce_expected(reduce_op, n, j) if rank == 0 else None
    if op == "sendrecv":
        return pattern.values((rank - 1) % n, j)
    raise ValueError(op)


def count_wrong(op: str, reduce_op: str, bufs: Buffers, n: int, rank: int, dtype: str) -> int:
    """Elements of the result that differ from the expected values on this rank."""
    import torch

    res = bufs.result
    total = res.numel()
    wrong = 0
    for start in range(0, total, CHUNK):
        stop = min(total, start + CHUNK)
        exp = expected_chunk(op, reduce_op, n, rank, bufs.count, start, stop, res.device)
        if exp is None:
            return 0
        got = res[start:stop].to(torch.float64)
        exp = exp.to(torch.float64)
        tol = pattern.tolerance(dtype, float(exp.abs().max()) if exp.numel() else 0.0)
        bad = ~((got - exp).abs() <= tol * exp.abs())  # NaN compares false: counted wrong
        wrong += int(bad.sum())
    return wrong
