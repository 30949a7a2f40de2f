"""The fused MoE kernel's block map: which expert, rows and block size each row block covers.

An expert with r rows gets r // BLOCK_M full blocks; the rest, rounded up to
TAIL_M rows, is cut into blocks of TAIL_M * 2^j rows, largest first (at most
one of each size), so an expert pads fewer than TAIL_M rows (TAIL_M = BLOCK_M:
the classic map, the last block padded up to BLOCK_M). With ATTACH_M, an
expert whose last rows (after at least one full block) number at most ATTACH_M
instead gives its last full block those rows too (size class BLOCK_M +
ATTACH_M): one program computes both against one read of each weight tile.
Blocks are numbered
expert after expert; spare entries (the map is sized for the worst case, so no
count reaches the host) name expert L, which the kernel skips.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch


class Blocks(NamedTuple):
    expert: torch.Tensor   # int32 [count]: the block's expert (L: spare)
    row0: torch.Tensor     # int32 [count]: its first row, counted from the expert's first row
    rows: torch.Tensor     # int32 [count]: its size class (BLOCK_M, or a tail size)
    end: torch.Tensor      # int32 [L]: cumulative number of blocks per expert
    count: int             # entries (the grid's row dimension)


def tail_sizes(block_m: int, tail_m: int) -> list[int]:
    """Block sizes below BLOCK_M a map may use, largest first."""
    out, size = [], block_m // 2
    while size >= tail_m:
        out.append(size)
        size //= 2
    return out


def max_blocks(rows: int, experts: int, block_m: int, tail_m: int) -> int:
    return -(-rows // block_m) + experts * (1 + len(tail_sizes(block_m, tail_m)))


def expert_blocks(r: int, block_m: int, tail_m: int, attach_m: int = 0) -> list[tuple[int, int]]:
    """(first row, size class) of each block of an expert with r rows."""
    full, rem = divmod(r, block_m)
    if attach_m and full and 0 < rem <= attach_m:
        return [(i * block_m, block_m) for i in range(full - 1)] + [((full - 1) * block_m,
                                                                     block_m + attach_m)]
    units = -(-r // tail_m)
    per = block_m // tail_m
    full, rest = divmod(units, per)
    out = [(i * block_m, block_m) for i in range(full)]
    row = full * block_m
    for size in tail_sizes(block_m, tail_m):
        if rest * tail_m >= size:
            out.append((row, size))
            row += size
            rest -= size // tail_m
    return out


def block_map_reference(ends: torch.Tensor, block_m: int, rows: int, tail_m: int = 0,
                        attach_m: int = 0) -> Blocks:
    """The block map in plain Python (tests compare the device map with it)."""
    tail_m = tail_m or block_m
    L = ends.numel()
    bounds = [0] + [int(v) for v in ends.tolist()]
    count = max_blocks(rows, L, block_m, tail_m)
    expert, row0, size, end = [], [], [], []
    for e in range(L):
        for first, n in expert_blocks(bounds[e + 1] - bounds[e], block_m, tail_m, attach_m):
            expert.append(e), row0.append(first), size.append(n)
        end.append(len(expert))
    spare = count - len(expert)
    expert += [L] * spare
    row0 += [0] * spare
    size += [0] * spare
    as_t = functools.partial(torch.tensor, dtype=torch.int32, device=ends.device)
    return Blocks(as_t(expert), as_t(row0), as_t(size), as_t(end), count)


@functools.lru_cache(maxsize=None)
def _map_kernel():
    """One small program builds the map (the experts in parallel lanes)."""
    import triton
    import triton.language as tl

    @triton.jit
    def block_map_kernel(ends_ptr, expert_ptr, row0_ptr, rows_ptr, end_ptr, L, count,
                         BLOCK_M: tl.constexpr, TAIL_M: tl.constexpr, ATTACH_M: tl.constexpr,
                         BLOCK_L: tl.constexpr,
                         NBITS: tl.constexpr, FILL: tl.constexpr):
        e = tl.arange(0, BLOCK_L)
        ok = e < L
        end = tl.load(ends_ptr + e, mask=ok, other=0)
        start = tl.load(ends_ptr + e - 1, mask=ok & (e > 0), other=0)
        units = (end - start + TAIL_M - 1) // TAIL_M
        full = units // (BLOCK_M // TAIL_M)
        rest = units % (BLOCK_M // TAIL_M)
        attach = e < 0   # all false
        if ATTACH_M > 0:
            q = (end - start) // BLOCK_M
            rem = (end - start) % BLOCK_M
            attach = (q >= 1) & (rem > 0) & (rem <= ATTACH_M)
            full = tl.where(attach, q, full)
            rest = tl.where(attach, 0, rest)
        nblk = full
        for j in tl.static_range(NBITS):
            nblk += (rest >> j) & 1
        cum = tl.cumsum(nblk, 0)
        tl.store(end_ptr + e, cum, mask=ok)
        slot = cum - nblk
        for j in range(0, tl.max(full, 0)):
            here = ok & (j < full)
            tl.store(expert_ptr + slot + j, e, mask=here)
            tl.store(row0_ptr + slot + j, j * BLOCK_M, mask=here)
            size = tl.where(attach & (j == full - 1), BLOCK_M + ATTACH_M, BLOCK_M)
            tl.store(rows_ptr + slot + j, size, mask=here)
        slot += full
        row = full * BLOCK_M
        for i in tl.static_range(NBITS):   # the tail blocks, largest first
            j = NBITS - 1 - i
            has = ((rest >> j) & 1) != 0
            here = ok & has
            tl.store(expert_ptr + slot, e, mask=here)
            tl.store(row0_ptr + slot, row, mask=here)
            tl.store(rows_ptr + slot, tl.zeros_like(e) + (TAIL_M << j), mask=here)
            slot += has.to(tl.int32)
            row += has.to(tl.int32) * (TAIL_M << j)
        for i in range(tl.sum(nblk, 0), count, FILL):
            idx = i + tl.arange(0, FILL)
            spare = idx < count
            zero = tl.zeros([FILL], dtype=tl.int32)
            tl.store(expert_ptr + idx, zero + L, mask=spare)
            tl.store(row0_ptr + idx, zero, mask=spare)
            tl.store(rows_ptr + idx, zero, mask=spare)

    return block_map_kernel


def block_map(ends: torch.Tensor, block_m: int, rows: int, tail_m: int = 0,
              attach_m: int = 0) -> Blocks:
    """block_map_reference's map from one Triton program (ends: int32 on the device)."""
    tail_m = tail_m or block_m
    L = ends.numel()
    count = max_blocks(rows, L, block_m, tail_m)
    new = functools.partial(torch.empty, dtype=torch.int32, device=ends.device)
    out = Blocks(new(count), new(count), new(count), new(L), count)
    block_l = 1 << max(L - 1, 1).bit_length()
    nbits = (block_m // tail_m).bit_length() - 1
    _map_kernel()[(1,)](ends, out.expert, out.row0, out.rows, out.end, L, count,
                        BLOCK_M=block_m, TAIL_M=tail_m, ATTACH_M=attach_m, BLOCK_L=block_l,
                        NBITS=nbits,
                        FILL=1024, num_warps=4)
    return out
