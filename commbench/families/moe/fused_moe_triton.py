"""Our fused MoE expert kernel in Triton: gate/up GEMM with SwiGLU in its epilogue, then the down GEMM.

The rows arrive grouped by local expert (``ends``: int32 cumulative group ends,
on the device). As in vLLM's fused MoE design, the rows are cut into blocks
that never straddle two experts and every program computes one (row block,
column tile) against its block's expert. The block map (fused_moe_blocks) is
built on the device, so no group size reaches the host; the grid is sized for
the worst case and spare programs exit at once. Full blocks have BLOCK_M rows;
an expert's remainder rides on its last full block (ATTACH_M) or is cut into
smaller blocks (down to TAIL_M rows), so the tensor cores are not spent on
padding (fused_moe_kernel).

Kernel 1 reads the gate and up tiles of the fused w13 [L, 2I, H] together and
writes silu(gate) * up as BF16 [rows, I]; kernel 2 multiplies that by w2
[L, H, I]. At decode nearly every expert is read for a few rows, so the time is
the weight bytes over HBM bandwidth; at prefill the tensor cores and the
padding set it. The tile configurations are tuned per shape on first use.

Triton is imported lazily (``available()``): CPU machines without it can
import this module and the family, and the `fused` path says why it cannot run.
"""
from __future__ import annotations

import functools
import os

import torch

from .fused_moe_blocks import Blocks, block_map, block_map_reference  # noqa: F401 (re-exported)
from .fused_moe_config import (DECODE_CONFIGS, MID_CONFIGS, PREFILL_CONFIGS,  # noqa: F401
                               PREFILL_DOWN_CONFIGS, PREFILL_UP_CONFIGS, Config, candidates)

TUNE_ENV = "COMMBENCH_MOE_TUNE_VERBOSE"   # 1: print each tried configuration's time


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
def _tma_allocator(device_type: str) -> None:
    """Device-side tensor descriptors need scratch memory from an allocator Triton calls."""
    import triton

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                 device=device_type))


def pack_pairs(w13: torch.Tensor) -> torch.Tensor:
    """w13 [L, 2N, K] ([gate; up] rows per expert) with its rows reordered gate 0, up 0, gate 1,
    up 1, ...: the layout a ``pair=2`` configuration reads (one copy, made once per weight)."""
    L, two_n, K = w13.shape
    return w13.view(L, 2, two_n // 2, K).transpose(1, 2).reshape(L, two_n, K).contiguous()


def moe_gemm(x: torch.Tensor, w: torch.Tensor, ends: torch.Tensor, swiglu: bool,
             cfg: Config, blocks: Blocks | None = None) -> torch.Tensor:
    """Grouped x @ w[e]^T per expert group; swiglu: w is w13 [L, 2N, K] and the output is
    silu(gate) * up [rows, N]; else w is [L, N, K]. With ``cfg.pair == 2`` w13 must be
    pack_pairs(w13). ``blocks``: block_map(ends, cfg.block_m, rows, cfg.tail, cfg.attach_m)
    when the caller has it already."""
    rows, K = x.shape
    L = w.shape[0]
    N = w.shape[1] // 2 if swiglu else w.shape[1]
    out = torch.empty(rows, N, dtype=torch.bfloat16, device=x.device)
    if rows == 0:
        return out
    b = blocks or block_map(ends, cfg.block_m, rows, cfg.tail, cfg.attach_m)
    if cfg.tma:
        _tma_allocator(x.device.type)
    grid = (b.count * -(-N // cfg.block_n),)
    from .fused_moe_kernel import moe_gemm as kernel   # imports Triton

    kernel[grid](x, w, out, b.expert, b.row0, b.rows, b.end, ends, L, N, K, rows,
                 L * w.shape[1], x.stride(0), w.stride(0), w.stride(1), out.stride(0),
                 SWIGLU=swiglu, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                 TAIL_M=cfg.tail, ATTACH_M=cfg.attach_m, TMA=cfg.tma,
                 PAIR=cfg.pair if swiglu else 0,
                 num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return out


class FusedExperts:
    """The fused path of LocalExperts: picks each GEMM's configuration per shape on first use
    (timing every candidate; ``tried`` keeps what each took) and reuses it."""

    def __init__(self, w13: torch.Tensor, w2: torch.Tensor):
        self.w13, self.w2 = w13, w2
        self._w13_pairs: torch.Tensor | None = None
        self._w13_version = -1   # w13's version counter when the packed copy was made
        self.chosen: dict[tuple, Config] = {}
        self.tried: list[dict] = []
        self.only: tuple[Config, ...] = ()   # when set: the candidates to try (tests pin one)

    def weights_for(self, cfg: Config) -> torch.Tensor:
        """The gate/up weight a configuration reads (pair=2: the packed copy, made once)."""
        if cfg.pair != 2:
            return self.w13
        if self._w13_pairs is not None and self._w13_version != self.w13._version:
            self._w13_pairs = None   # w13 was written since (a test breaking a layer, say): repack
        if self._w13_pairs is None:
            need = self.w13.numel() * self.w13.element_size()
            if self.w13.is_cuda:
                free = (torch.cuda.mem_get_info(self.w13.device)[0]   # + what torch's cache holds
                        + torch.cuda.memory_reserved(self.w13.device)
                        - torch.cuda.memory_allocated(self.w13.device))
                if free < need * 1.1:
                    raise MemoryError(f"pair=2 reads a packed copy of w13 ({need / 1e9:.1f} GB); "
                                      f"{free / 1e9:.1f} GB free")
            self._w13_pairs = pack_pairs(self.w13)
            self._w13_version = self.w13._version
        return self._w13_pairs

    def _pick(self, which: str, x, w, ends, swiglu: bool) -> Config:
        key = (which, x.shape[0])
        if key not in self.chosen:
            self.chosen[key] = self._tune(which, x, w, ends, swiglu)
            if swiglu and not any(c.pair == 2 for (g, _), c in self.chosen.items() if g == which):
                self._w13_pairs = None   # the packed copy only stays for a chosen configuration
        return self.chosen[key]

    def _tune(self, which: str, x, w, ends, swiglu: bool) -> Config:
        from triton.testing import do_bench

        best, best_ms, failure = None, float("inf"), ""
        verbose = os.environ.get(TUNE_ENV) == "1"
        for cfg in self.only or candidates(x.shape[0], w.shape[0], swiglu):
            try:
                wc = self.weights_for(cfg) if swiglu else w
                ms = do_bench(lambda: moe_gemm(x, wc, ends, swiglu, cfg), warmup=2, rep=10)
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
        blocks = block_map(ends, up.block_m, xe.shape[0], up.tail, up.attach_m)
        h = moe_gemm(xe, self.weights_for(up), ends, True, up, blocks)
        down = self._pick("down", h, self.w2, ends, False)
        same = (down.block_m, down.tail, down.attach_m) == (up.block_m, up.tail, up.attach_m)
        return moe_gemm(h, self.w2, ends, False, down, blocks if same else None)
