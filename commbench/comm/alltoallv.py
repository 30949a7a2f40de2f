"""alltoallv's buffers and check: each rank sends its row of a traffic matrix (comm.traffic) and
receives its column, as consecutive blocks ordered by peer. Rank r's send element i holds
pattern.values(r, i), so the block a rank receives from s is s's values at that block's start in
s's send buffer: every received byte is checked against its sender and place."""
from __future__ import annotations

from ..dtypes import torch_dtype
from . import pattern
from .buffers import CHUNK, Buffers, _fill, _new
from .traffic import Layout


def rotation(layout: Layout, elem_bytes: int, span_bytes: int) -> tuple[int, int]:
    """(shift_bytes, steps): the busiest rank's larger buffer, the same on every rank, so every
    rank's allocations have one size (symmetric windows are registered collectively)."""
    shift = max(layout.busiest, 1) * elem_bytes
    if span_bytes <= shift:
        return shift, 1
    return shift, span_bytes // shift


def allocate(layout: Layout, rank: int, dtype: str, device: str, span_bytes: int = 0, offset_bytes: int = 0,
             alloc_bytes=None) -> Buffers:
    """Send (this rank's row, filled) and receive (its column, zeroed) buffers of ``layout``."""
    import torch

    td = torch_dtype(dtype)
    elem = torch.empty((), dtype=td).element_size()
    shift_bytes, steps = rotation(layout, elem, span_bytes)
    pools: list = []
    allocations: list = []
    size = max(layout.busiest, 1)
    send = _new(size, td, elem, device, shift_bytes, steps, offset_bytes, alloc_bytes, pools,
                allocations)[:layout.send_total]
    recv = _new(size, td, elem, device, shift_bytes, steps, offset_bytes, alloc_bytes, pools,
                allocations)[:layout.recv_total]
    recv.fill_(0)
    _fill(send, rank)
    for pool, own in pools:
        pool[1:, :own].copy_(pool[0, :own].expand(steps - 1, own))
    return Buffers(send, recv, recv, layout.send_total, shift_bytes=shift_bytes, steps=steps,
                   allocations=allocations, layout=layout)


def refill(bufs: Buffers, rank: int) -> None:
    bufs.recv.fill_(0)
    _fill(bufs.send, rank)


def count_wrong(bufs: Buffers, dtype: str) -> int:
    """Received elements that differ from their sender's values at their place."""
    import torch

    wrong = 0
    for src, start, length, src_start in bufs.layout.expected_blocks():
        for off in range(0, length, CHUNK):
            stop = min(length, off + CHUNK)
            idx = torch.arange(src_start + off, src_start + stop, device=bufs.recv.device, dtype=torch.int64)
            exp = pattern.values(src, idx).to(torch.float64)
            got = bufs.recv[start + off:start + stop].to(torch.float64)
            tol = pattern.tolerance(dtype, float(exp.abs().max()))
            wrong += int((~((got - exp).abs() <= tol * exp.abs())).sum())
    return wrong
