"""Our fused MoE expert kernel in Triton: gate/up GEMM with SwiGLU in its epilogue, then the down GEMM.

The rows arrive grouped by local expert (``ends``: int32 cumulative group ends,
on the device). As in vLLM's fused MoE design, the rows are cut into blocks of
BLOCK_M rows that never straddle two experts (each expert's last block is
padded and masked), and every program computes one (row block, column block)
tile against its block's expert. The block -> expert map is built on the
device, so no group size reaches the host; the grid is sized for the worst
case (cdiv(rows, BLOCK_M) + experts blocks) and spare programs exit at once.

Kernel 1 reads the gate and up tiles of the fused w13 [L, 2I, H] together and
writes silu(gate) * up as BF16 [rows, I]; kernel 2 multiplies that by w2
[L, H, I]. At decode nearly every expert is read for a few rows, so the time is
the weight bytes over HBM bandwidth: the tile configurations (BLOCK_K, stages)
are tuned per shape on first use to keep enough weight bytes in flight.

Triton is imported lazily (``available()``): CPU machines without it can
import this module and the family, and the `fused` path says why it cannot run.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch

TUNE_ENV = "COMMBENCH_MOE_TUNE_VERBOSE"   # 1: print each tried configuration's time


@dataclass(frozen=True)
class Config:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int

    def label(self) -> str:
        return (f"BM{self.block_m}-BN{self.block_n}-BK{self.block_k}-"
                f"w{self.num_warps}-s{self.num_stages}")


# Few rows per expert (decode): one 16-row block per expert, many column tiles, deep K pipelines.
DECODE_CONFIGS = (
    Config(16, 64, 128, 4, 4), Config(16, 64, 256, 4, 3), Config(16, 128, 128, 4, 4),
    Config(16, 32, 256, 4, 4), Config(32, 64, 128, 4, 4), Config(16, 64, 64, 4, 4),
    Config(16, 128, 64, 4, 3),
    # three stages: two CTAs per SM, so one refills its pipeline while the other streams (a
    # short K loop, as the down GEMM's, otherwise pays its pipeline fill once per tile)
    Config(16, 128, 128, 4, 3), Config(16, 64, 128, 4, 3),
)
# Tens of rows per expert.
MID_CONFIGS = (
    Config(32, 64, 128, 4, 4), Config(32, 128, 128, 4, 3), Config(64, 64, 128, 4, 3),
    Config(64, 128, 64, 4, 4),
)
# Prefill: hundreds of rows per expert, tensor-core tiles (two warpgroups for 128-row blocks).
PREFILL_CONFIGS = (
    Config(64, 128, 64, 4, 4), Config(128, 128, 64, 8, 3), Config(128, 64, 64, 4, 4),
    Config(64, 256, 64, 8, 3), Config(128, 128, 64, 8, 4), Config(128, 256, 64, 8, 3),
    Config(128, 128, 32, 8, 5),
)


def candidates(rows: int, experts: int) -> tuple[Config, ...]:
    """The configurations worth trying for rows spread over experts."""
    per_expert = rows / max(experts, 1)
    if per_expert <= 16:
        return DECODE_CONFIGS
    return MID_CONFIGS if per_expert <= 48 else PREFILL_CONFIGS


def available() -> str:
    """'' when the fused kernel can run here, else why not."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed (the fused expert kernel is written in Triton)"
    if not torch.cuda.is_available():
        return "the fused expert kernel needs a CUDA GPU"
    return ""


@functools.lru_cache(maxsize=None)
def _kernel():
    """The Triton kernel, compiled on first use (import triton only here)."""
    import triton
    import triton.language as tl

    @triton.heuristics({"EVEN_K": lambda a: a["K"] % a["BLOCK_K"] == 0,
                        "EVEN_N": lambda a: a["N"] % a["BLOCK_N"] == 0})
    @triton.jit
    def moe_gemm(x_ptr, w_ptr, out_ptr, blk_expert_ptr, blk_end_ptr, ends_ptr,
                 num_experts, N, K, stride_xm, stride_we, stride_wn, stride_om,
                 SWIGLU: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, EVEN_N: tl.constexpr):
        pid = tl.program_id(0)
        # consecutive programs: the column tiles of one row block, then of the expert's next
        # block: the rows stay in L2 across the tiles, and each weight tile is read by the
        # expert's row blocks at about the same time (at prefill, rows x tiles would otherwise
        # re-read the rows from HBM once per column tile)
        num_n = tl.cdiv(N, BLOCK_N)
        pid_m = pid // num_n
        pid_n = pid % num_n
        e = tl.load(blk_expert_ptr + pid_m)
        if e >= num_experts:
            return
        end = tl.load(ends_ptr + e)
        start = tl.load(ends_ptr + tl.maximum(e - 1, 0))
        start = tl.where(e > 0, start, 0)
        first_blk = tl.load(blk_end_ptr + e) - tl.cdiv(end - start, BLOCK_M)
        row0 = start + (pid_m - first_blk) * BLOCK_M
        offs_m = row0 + tl.arange(0, BLOCK_M)
        mask_m = offs_m < end
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = offs_n < N
        offs_k = tl.arange(0, BLOCK_K)
        x_ptrs = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm + offs_k[None, :]
        w_base = w_ptr + e.to(tl.int64) * stride_we
        wa_ptrs = w_base + offs_n.to(tl.int64)[None, :] * stride_wn + offs_k[:, None]
        acc_a = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if SWIGLU:   # up rows sit N rows below the gate rows in w13
            wb_ptrs = wa_ptrs + N * stride_wn
            acc_b = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            if EVEN_K:
                a = tl.load(x_ptrs, mask=mask_m[:, None], other=0.0)
                if EVEN_N:
                    wa = tl.load(wa_ptrs)
                else:
                    wa = tl.load(wa_ptrs, mask=mask_n[None, :], other=0.0)
            else:
                k_ok = offs_k < K - k0
                a = tl.load(x_ptrs, mask=mask_m[:, None] & k_ok[None, :], other=0.0)
                wa = tl.load(wa_ptrs, mask=k_ok[:, None] & mask_n[None, :], other=0.0)
            acc_a = tl.dot(a, wa, acc_a)
            if SWIGLU:
                if EVEN_K:
                    if EVEN_N:
                        wb = tl.load(wb_ptrs)
                    else:
                        wb = tl.load(wb_ptrs, mask=mask_n[None, :], other=0.0)
                else:
                    wb = tl.load(wb_ptrs, mask=k_ok[:, None] & mask_n[None, :], other=0.0)
                acc_b = tl.dot(a, wb, acc_b)
                wb_ptrs += BLOCK_K
            x_ptrs += BLOCK_K
            wa_ptrs += BLOCK_K
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

    return moe_gemm



def block_map_reference(ends: torch.Tensor, block_m: int, rows: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(expert of each row block, cumulative block ends per expert, grid rows), in torch ops.

    Spare blocks (past the last expert's) map to expert L, which the kernel skips."""
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    blk_end = torch.cumsum((counts + block_m - 1) // block_m, 0, dtype=torch.int32)
    max_blocks = -(-rows // block_m) + ends.numel()
    ids = torch.arange(max_blocks, device=ends.device, dtype=torch.int32)
    blk_expert = torch.searchsorted(blk_end, ids, right=True).to(torch.int32)
    return blk_expert, blk_end, max_blocks


@functools.lru_cache(maxsize=None)
def _map_kernel():
    """One small program computes the block map (instead of five dependent torch kernels)."""
    import triton
    import triton.language as tl

    @triton.jit
    def block_map_kernel(ends_ptr, blk_expert_ptr, blk_end_ptr, L, max_blocks,
                         BLOCK_M: tl.constexpr, BLOCK_L: tl.constexpr, FILL: tl.constexpr):
        e = tl.arange(0, BLOCK_L)
        ok = e < L
        end = tl.load(ends_ptr + e, mask=ok, other=0)
        start = tl.load(ends_ptr + e - 1, mask=ok & (e > 0), other=0)
        nblk = (end - start + BLOCK_M - 1) // BLOCK_M
        cum = tl.cumsum(nblk, 0)
        tl.store(blk_end_ptr + e, cum, mask=ok)
        first = cum - nblk
        for j in range(0, tl.max(nblk, 0)):
            tl.store(blk_expert_ptr + first + j, e, mask=ok & (j < nblk))
        for i in range(tl.sum(nblk, 0), max_blocks, FILL):
            idx = i + tl.arange(0, FILL)
            tl.store(blk_expert_ptr + idx, tl.zeros([FILL], dtype=tl.int32) + L, mask=idx < max_blocks)

    return block_map_kernel


def block_map(ends: torch.Tensor, block_m: int, rows: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """block_map_reference's result from one Triton program (ends: int32 on the device)."""
    L = ends.numel()
    max_blocks = -(-rows // block_m) + L
    blk_expert = torch.empty(max_blocks, dtype=torch.int32, device=ends.device)
    blk_end = torch.empty(L, dtype=torch.int32, device=ends.device)
    block_l = 1 << max(L - 1, 1).bit_length()
    _map_kernel()[(1,)](ends, blk_expert, blk_end, L, max_blocks,
                        BLOCK_M=block_m, BLOCK_L=block_l, FILL=1024, num_warps=4)
    return blk_expert, blk_end, max_blocks


def moe_gemm(x: torch.Tensor, w: torch.Tensor, ends: torch.Tensor, swiglu: bool,
             cfg: Config, blocks: tuple | None = None) -> torch.Tensor:
    """Grouped x @ w[e]^T per expert group; swiglu: w is w13 [L, 2N, K] and the output is
    silu(gate) * up [rows, N]; else w is [L, N, K]. ``blocks``: block_map(ends, cfg.block_m,
    rows) when the caller has it already."""
    rows, K = x.shape
    L = w.shape[0]
    N = w.shape[1] // 2 if swiglu else w.shape[1]
    out = torch.empty(rows, N, dtype=torch.bfloat16, device=x.device)
    if rows == 0:
        return out
    blk_expert, blk_end, max_blocks = blocks or block_map(ends, cfg.block_m, rows)
    grid = (max_blocks * -(-N // cfg.block_n),)
    _kernel()[grid](x, w, out, blk_expert, blk_end, ends, L, N, K,
                    x.stride(0), w.stride(0), w.stride(1), out.stride(0),
                    SWIGLU=swiglu, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                    num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out


class FusedExperts:
    """The fused path of LocalExperts: picks each GEMM's configuration per shape on first use
    (timing every candidate; ``tried`` keeps what each took) and reuses it."""

    def __init__(self, w13: torch.Tensor, w2: torch.Tensor):
        self.w13, self.w2 = w13, w2
        self.chosen: dict[tuple, Config] = {}
        self.tried: list[dict] = []
        self.only: tuple[Config, ...] = ()   # when set: the candidates to try (tests pin one)

    def _pick(self, which: str, x, w, ends, swiglu: bool) -> Config:
        key = (which, x.shape[0])
        if key not in self.chosen:
            self.chosen[key] = self._tune(which, x, w, ends, swiglu)
        return self.chosen[key]

    def _tune(self, which: str, x, w, ends, swiglu: bool) -> Config:
        from triton.testing import do_bench

        best, best_ms, failure = None, float("inf"), ""
        verbose = os.environ.get(TUNE_ENV) == "1"
        for cfg in self.only or candidates(x.shape[0], w.shape[0]):
            try:
                ms = do_bench(lambda: moe_gemm(x, w, ends, swiglu, cfg), warmup=2, rep=10)
            except Exception as exc:  # noqa: BLE001 - a configuration this GPU cannot hold (shared memory)
                ms, failure = float("inf"), f"{type(exc).__name__}: {str(exc)[:300]}"
                if verbose:
                    print(f"fused-moe tune {which} {cfg.label()}: {type(exc).__name__}: "
                          f"{str(exc)[:200]}", flush=True)
            self.tried.append({"gemm": which, "rows": x.shape[0], "config": cfg.label(), "ms": ms})
            if verbose:
                print(f"fused-moe tune {which} rows={x.shape[0]} {cfg.label()}: {ms * 1e3:.1f} us",
                      flush=True)
            if ms < best_ms:
                best, best_ms = cfg, ms
        if best is None:
            raise RuntimeError(f"no fused-MoE configuration runs here (last: {failure})")
        return best

    def forward(self, xe: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        up = self._pick("gate_up", xe, self.w13, ends, True)
        blocks = block_map(ends, up.block_m, xe.shape[0])
        h = moe_gemm(xe, self.w13, ends, True, up, blocks)
        down = self._pick("down", h, self.w2, ends, False)
        same = down.block_m == up.block_m   # both GEMMs share the block map when they can
        return moe_gemm(h, self.w2, ends, False, down, blocks if same else None)
