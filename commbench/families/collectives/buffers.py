"""Buffers for one collective Case, filled with the verifiable pattern, and the check.

Everything is torch (CUDA tensors for nccl, CPU tensors for gloo and mpi; mpi4py
reads CPU tensors through their numpy views). Fill and check work in chunks so
an 8 GiB buffer never needs an 8 GiB index array.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...dtypes import torch_dtype
from . import pattern
from .ops import OPS

CHUNK = 1 << 26  # elements per fill/check step


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
    """Allocate and fill send/recv for ``op`` with nccl-tests' in-place aliasing (ops.OPS)."""
    import torch

    spec, td = OPS[op], torch_dtype(dtype)
    mine = slice(rank * count, (rank + 1) * count)
    form = spec.in_place if in_place else None

    def new(chunks: bool):
        return torch.empty(count * (n if chunks else 1), dtype=td, device=device)

    if form == "recv_slice":        # the send buffer is this rank's chunk of the output
        recv = new(spec.recv_chunks)
        send = recv[mine]
    elif form == "send_slice":      # the output is this rank's chunk of the input
        send = new(spec.send_chunks)
        recv = send[mine]
    elif form == "same":
        send = recv = new(spec.send_chunks)
    else:
        send, recv = new(spec.send_chunks), new(spec.recv_chunks)
    if recv is not send and form != "send_slice":
        recv.fill_(0)
    _fill(send, rank)
    return Buffers(send, recv, recv, count)


def refill(op: str, bufs: Buffers, rank: int, in_place: bool) -> None:
    """Restore inputs before the check (timed in-place iterations overwrote them)."""
    if not in_place or OPS[op].in_place == "recv_slice":
        bufs.recv.fill_(0)
    _fill(bufs.send, rank)


def expected_chunk(op: str, reduce_op: str, n: int, rank: int, count: int, start: int, stop: int, device):
    """Expected values of result positions [start, stop) on ``rank``; None if unchecked there."""
    import torch

    j = torch.arange(start, stop, device=device, dtype=torch.int64)
    return OPS[op].expected(reduce_op, n, rank, count, j)


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
