"""The Triton kernel of the fused MoE expert GEMM (this module imports Triton: import it lazily).

One program computes one (row block, column tile) against its block's expert.
A block's size class (the block map's ``rows``) picks one of the compiled tile
loops: BLOCK_M rows, tails of BLOCK_M/2 ... TAIL_M rows (an expert's tail costs
tensor-core work for its own rows, not a full block's), or BLOCK_M rows plus
ATTACH_M more (a second, smaller product against the same weight tiles, so
the leftover rows cost no extra weight read). The programs of one expert run
its row blocks for column tile 0, then tile 1, and so on: blocks that share a
weight tile are launched together and read it from HBM about once (the others
hit L2), and the expert's rows stay in L2 across its tiles.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _epilogue(acc_a, acc_b, out_ptr, offs_m, mask_m, offs_n, mask_n, stride_om,
              SWIGLU: tl.constexpr, PAIR: tl.constexpr):
    if PAIR > 0:
        # one accumulator with gate and up columns interleaved (2j: gate j, 2j+1: up j): each
        # thread holds both columns of a pair, so the split moves no data
        acc_a, acc_b = tl.split(tl.reshape(acc_a, (acc_a.shape[0], acc_a.shape[1] // 2, 2)))
    if SWIGLU:
        # the reference rounds the GEMM output to BF16 before SwiGLU: do the same
        g = acc_a.to(tl.bfloat16).to(tl.float32)
        u = acc_b.to(tl.bfloat16).to(tl.float32)
        h = (g / (1.0 + tl.exp(-g))).to(tl.bfloat16).to(tl.float32) * u
        result = h.to(tl.bfloat16)
    else:
        result = acc_a.to(tl.bfloat16)
    out_ptrs = out_ptr + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    tl.store(out_ptrs, result, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _load_w(ptrs, k_ok, wmask, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr):
    """A [BK, columns] weight tile, masked only where K or N does not divide evenly."""
    if EVEN_K:
        if EVEN_N:
            w = tl.load(ptrs)
        else:
            w = tl.load(ptrs, mask=wmask[None, :], other=0.0)
    else:
        w = tl.load(ptrs, mask=k_ok[:, None] & wmask[None, :], other=0.0)
    return w


@triton.jit
def _load_x(ptrs, mask_rows, k_ok, EVEN_K: tl.constexpr):
    """A [rows, BK] tile of x; rows past the end read as zeros (and K's tail when it is uneven)."""
    if EVEN_K:
        x = tl.load(ptrs, mask=mask_rows[:, None], other=0.0)
    else:
        x = tl.load(ptrs, mask=mask_rows[:, None] & k_ok[None, :], other=0.0)
    return x


@triton.jit
def _tile(x_ptr, w_ptr, out_ptr, e, row0, end, n0, N, K, total_rows, w_rows,
          stride_xm, stride_we, stride_wn, stride_om,
          SWIGLU: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
          EVEN_K: tl.constexpr, EVEN_N: tl.constexpr, TMA: tl.constexpr, EXTRA: tl.constexpr,
          PAIR: tl.constexpr):
    """Rows [row0, row0 + BM) (and, with EXTRA, the next EXTRA rows) of expert e, columns
    [n0, n0 + BN); rows at or past `end` are computed but not stored. PAIR (gate/up only):
    0: gate and up are two products; 1: one product over 2*BN weight rows gathered in pairs
    (gate j, up j) from w13's [gate; up] layout; 2: the same from a w13 whose rows are already
    interleaved that way (fused_moe_triton.pack_pairs). The weights come through TMA descriptors
    (_tile_tma) or through pointers (_tile_ptrs); Triton inlines both, so this is one kernel."""
    tl.static_assert(PAIR == 0 or SWIGLU, "pairs are gate and up rows: the gate/up GEMM only")
    if TMA:
        _tile_tma(x_ptr, w_ptr, out_ptr, e, row0, end, n0, N, K, total_rows, w_rows,
                  stride_xm, stride_we, stride_wn, stride_om, SWIGLU, BM, BN, BK, EXTRA, PAIR)
    else:
        _tile_ptrs(x_ptr, w_ptr, out_ptr, e, row0, end, n0, N, K,
                   stride_xm, stride_we, stride_wn, stride_om, SWIGLU, BM, BN, BK, EVEN_K, EVEN_N, EXTRA, PAIR)


@triton.jit
def _tile_tma(x_ptr, w_ptr, out_ptr, e, row0, end, n0, N, K, total_rows, w_rows,
              stride_xm, stride_we, stride_wn, stride_om,
              SWIGLU: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              EXTRA: tl.constexpr, PAIR: tl.constexpr):
    """_tile with TMA loads. Rows past the block belong to the next expert (or lie past the end:
    zeros); their outputs are masked at the store. Columns past N read rows that are not this
    tile's (up rows; with pair=2 the next expert's, or zeros past the end): never stored either."""
    offs_m = row0 + tl.arange(0, BM)
    offs_n = n0 + tl.arange(0, BN)
    WN: tl.constexpr = 2 * BN if PAIR > 0 else BN   # weight rows one product reads
    TWO: tl.constexpr = SWIGLU and PAIR == 0        # a second (up) product
    acc_a = tl.zeros((BM, WN), dtype=tl.float32)
    acc_b = tl.zeros((BM, BN), dtype=tl.float32)   # unused (and removed) unless TWO
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[total_rows, K], strides=[stride_xm, 1], block_shape=[BM, BK])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[w_rows, K], strides=[stride_wn, 1], block_shape=[WN, BK])
    if EXTRA > 0:
        offs_x = row0 + BM + tl.arange(0, EXTRA)
        acc_c = tl.zeros((EXTRA, WN), dtype=tl.float32)
        acc_d = tl.zeros((EXTRA, BN), dtype=tl.float32)
        c_desc = tl.make_tensor_descriptor(x_ptr, shape=[total_rows, K], strides=[stride_xm, 1],
                                           block_shape=[EXTRA, BK])
    wrow = e * (stride_we // stride_wn) + (2 * n0 if PAIR > 0 else n0)
    for k0 in range(0, K, BK):
        a = x_desc.load([row0, k0])
        wa = w_desc.load([wrow, k0]).T
        acc_a = tl.dot(a, wa, acc_a)
        if EXTRA > 0:
            c = c_desc.load([row0 + BM, k0])
            acc_c = tl.dot(c, wa, acc_c)
        if TWO:   # up rows sit N rows below the gate rows in w13
            wb = w_desc.load([wrow + N, k0]).T
            acc_b = tl.dot(a, wb, acc_b)
            if EXTRA > 0:
                acc_d = tl.dot(c, wb, acc_d)
    _epilogue(acc_a, acc_b, out_ptr, offs_m, offs_m < end, offs_n, offs_n < N, stride_om, SWIGLU, PAIR)
    if EXTRA > 0:
        _epilogue(acc_c, acc_d, out_ptr, offs_x, offs_x < end, offs_n, offs_n < N, stride_om, SWIGLU, PAIR)


@triton.jit
def _weight_rows(n0, N, WN: tl.constexpr, BN: tl.constexpr, PAIR: tl.constexpr):
    """(the w13 rows one product reads for columns [n0, n0 + BN), which of them are real)."""
    if PAIR == 1:   # gate j and up j side by side, gathered from [gate; up]
        offs_w = tl.arange(0, WN)
        col = n0 + offs_w // 2
        wmask = col < N
        wrows = col + (offs_w % 2) * N
    elif PAIR == 2:   # already interleaved (pack_pairs)
        wrows = 2 * n0 + tl.arange(0, WN)
        wmask = wrows < 2 * N
    else:
        wrows = n0 + tl.arange(0, BN)
        wmask = wrows < N
    return wrows, wmask


@triton.jit
def _tile_ptrs(x_ptr, w_ptr, out_ptr, e, row0, end, n0, N, K,
               stride_xm, stride_we, stride_wn, stride_om,
               SWIGLU: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               EVEN_K: tl.constexpr, EVEN_N: tl.constexpr, EXTRA: tl.constexpr, PAIR: tl.constexpr):
    """_tile with pointer loads, masked only where K or N does not divide evenly."""
    offs_m = row0 + tl.arange(0, BM)
    mask_m = offs_m < end
    offs_n = n0 + tl.arange(0, BN)
    mask_n = offs_n < N
    WN: tl.constexpr = 2 * BN if PAIR > 0 else BN
    TWO: tl.constexpr = SWIGLU and PAIR == 0
    acc_a = tl.zeros((BM, WN), dtype=tl.float32)
    acc_b = tl.zeros((BM, BN), dtype=tl.float32)
    offs_k = tl.arange(0, BK)
    x_ptrs = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm + offs_k[None, :]
    if EXTRA > 0:
        offs_x = row0 + BM + tl.arange(0, EXTRA)
        mask_x = offs_x < end
        acc_c = tl.zeros((EXTRA, WN), dtype=tl.float32)
        acc_d = tl.zeros((EXTRA, BN), dtype=tl.float32)
        c_ptrs = x_ptr + offs_x.to(tl.int64)[:, None] * stride_xm + offs_k[None, :]
    wrows, wmask = _weight_rows(n0, N, WN, BN, PAIR)
    wa_ptrs = w_ptr + e.to(tl.int64) * stride_we + wrows.to(tl.int64)[None, :] * stride_wn + offs_k[:, None]
    wb_ptrs = wa_ptrs + N * stride_wn
    for k0 in range(0, K, BK):
        k_ok = offs_k < K - k0
        a = _load_x(x_ptrs, mask_m, k_ok, EVEN_K)
        wa = _load_w(wa_ptrs, k_ok, wmask, EVEN_K, EVEN_N)
        acc_a = tl.dot(a, wa, acc_a)
        if EXTRA > 0:
            c = _load_x(c_ptrs, mask_x, k_ok, EVEN_K)
            acc_c = tl.dot(c, wa, acc_c)
            c_ptrs += BK
        if TWO:
            wb = _load_w(wb_ptrs, k_ok, mask_n, EVEN_K, EVEN_N)
            acc_b = tl.dot(a, wb, acc_b)
            if EXTRA > 0:
                acc_d = tl.dot(c, wb, acc_d)
            wb_ptrs += BK
        x_ptrs += BK
        wa_ptrs += BK
    _epilogue(acc_a, acc_b, out_ptr, offs_m, mask_m, offs_n, mask_n, stride_om, SWIGLU, PAIR)
    if EXTRA > 0:
        _epilogue(acc_c, acc_d, out_ptr, offs_x, mask_x, offs_n, mask_n, stride_om, SWIGLU, PAIR)


@triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BLOCK_K"] == 0,
                    "EVEN_N": lambda a: a["N"] % a["BLOCK_N"] == 0})
@triton.jit
def moe_gemm(x_ptr, w_ptr, out_ptr, blk_expert_ptr, blk_row0_ptr, blk_rows_ptr, blk_end_ptr,
             ends_ptr, num_experts, N, K, total_rows, w_rows,
             stride_xm, stride_we, stride_wn, stride_om,
             SWIGLU: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             BLOCK_K: tl.constexpr, TAIL_M: tl.constexpr, ATTACH_M: tl.constexpr,
             TMA: tl.constexpr, PAIR: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    e = tl.load(blk_expert_ptr + pid // num_n)
    if e >= num_experts:
        return
    prev = tl.load(blk_end_ptr + tl.maximum(e - 1, 0))
    prev = tl.where(e > 0, prev, 0)
    # the expert's programs span [prev, end) * num_n: block-fastest inside it (a row block
    # running all its column tiles first measured 1-14% slower at prefill)
    nblk = tl.load(blk_end_ptr + e) - prev
    local = pid - prev * num_n
    blk = prev + local % nblk
    pid_n = local // nblk
    end = tl.load(ends_ptr + e)
    start = tl.load(ends_ptr + tl.maximum(e - 1, 0))
    start = tl.where(e > 0, start, 0)
    row0 = start + tl.load(blk_row0_ptr + blk)
    size = tl.load(blk_rows_ptr + blk)
    n0 = pid_n * BLOCK_N
    if size == BLOCK_M:
        _tile(x_ptr, w_ptr, out_ptr, e, row0, end, n0, N, K, total_rows, w_rows,
              stride_xm, stride_we, stride_wn, stride_om,
              SWIGLU, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, EVEN_N, TMA, 0, PAIR)
    if ATTACH_M > 0:
        if size == BLOCK_M + ATTACH_M:
            _tile(x_ptr, w_ptr, out_ptr, e, row0, end, n0, N, K, total_rows, w_rows,
                  stride_xm, stride_we, stride_wn, stride_om,
                  SWIGLU, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, EVEN_N, TMA, ATTACH_M, PAIR)
    if TAIL_M <= BLOCK_M // 2:
        if size == BLOCK_M // 2:
            _tile(x_ptr, w_ptr, out_ptr, e, row0, end, n0, N, K, total_rows, w_rows,
                  stride_xm, stride_we, stride_wn, stride_om,
                  SWIGLU, BLOCK_M // 2, BLOCK_N, BLOCK_K, EVEN_K, EVEN_N, TMA, 0, PAIR)
    if TAIL_M <= BLOCK_M // 4:
        if size == BLOCK_M // 4:
            _tile(x_ptr, w_ptr, out_ptr, e, row0, end, n0, N, K, total_rows, w_rows,
                  stride_xm, stride_we, stride_wn, stride_om,
                  SWIGLU, BLOCK_M // 4, BLOCK_N, BLOCK_K, EVEN_K, EVEN_N, TMA, 0, PAIR)
    if TAIL_M <= BLOCK_M // 8:
        if size == BLOCK_M // 8:
            _tile(x_ptr, w_ptr, out_ptr, e, row0, end, n0, N, K, total_rows, w_rows,
                  stride_xm, stride_we, stride_wn, stride_om,
                  SWIGLU, BLOCK_M // 8, BLOCK_N, BLOCK_K, EVEN_K, EVEN_N, TMA, 0, PAIR)
