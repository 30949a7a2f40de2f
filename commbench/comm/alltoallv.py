"""alltoallv's buffers and check: each rank sends its row of a traffic matrix (comm.traffic) and
receives its column, as consecutive blocks ordered by peer. Rank r's send element i holds
pattern.values(r, i), so the block a rank receives from s is s's values at that block's start in
s's send buffer: every received byte is checked against its sender and place. Allocation, fill,
rotation pools and the tolerance are comm.buffers'."""
from __future__ import annotations

from ..dtypes import size_bytes, torch_dtype
from . import pattern
from .buffers import CHUNK, Buffers, copy_heads, fill, mismatches, new_buffer, rotation
from .traffic import Layout


def allocate(layout: Layout, rank: int, dtype: str, device: str, span_bytes: int = 0, offset_bytes: int = 0,
             alloc_bytes=None) -> Buffers:
    """Send (this rank's row, filled) and receive (its column, zeroed) buffers of ``layout``.
    Both are sized by the busiest rank's larger side, the same on every rank, so every rank's
    allocations have one size (symmetric windows are registered collectively); a rank that sends
    or receives nothing still has them."""
    td, elem = torch_dtype(dtype), size_bytes(dtype)
    size = max(layout.busiest, 1)
    shift_bytes, steps = rotation(size * elem, span_bytes)
    pools: list = []
    allocations: list = []
    send, recv = (new_buffer(size, td, elem, device, shift_bytes, steps, offset_bytes, alloc_bytes, pools,
                             allocations) for _ in range(2))
    send, recv = send[:layout.send_total], recv[:layout.recv_total]
    recv.fill_(0)
    fill(send, rank)
    copy_heads(pools, steps)
    return Buffers(send, recv, recv, layout.send_total, shift_bytes=shift_bytes, steps=steps,
                   allocations=allocations, layout=layout)


def refill(bufs: Buffers, rank: int) -> None:
    bufs.recv.fill_(0)
    fill(bufs.send, rank)


def count_wrong(bufs: Buffers, dtype: str) -> int:
    """Received elements that differ from their sender's values at their place."""
    import torch

    wrong = 0
    for src, start, length, src_start in bufs.layout.expected_blocks():
        for off in range(0, length, CHUNK):
            stop = min(length, off + CHUNK)
            idx = torch.arange(src_start + off, src_start + stop, device=bufs.recv.device, dtype=torch.int64)
            wrong += mismatches(bufs.recv[start + off:start + stop], pattern.values(src, idx), dtype)
    return wrong
