"""Tile configurations of the fused MoE expert kernel, and which ones the tuner tries per shape."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    """One launch setting. Row blocks (fused_moe_blocks): ``tail_m``: the smallest block; an
    expert's leftover rows get blocks of BLOCK_M/2 ... tail_m rows (0: tail_m = block_m, the
    last block padded to BLOCK_M). ``attach_m``: an expert's last full block also takes up to
    attach_m leftover rows (one weight read for both). ``tma``: tiles loaded through tensor
    descriptors (TMA) instead of pointer loads. ``pair`` (gate/up only): 0, gate and up are two
    products of BLOCK_N columns each; 1, one product over 2*BLOCK_N weight rows taken in (gate j,
    up j) pairs from w13 (pointer loads); 2, the same from a copy of w13 with its rows stored in
    that order (``pack_pairs``; TMA can load it)."""
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    tail_m: int = 0
    tma: bool = False
    attach_m: int = 0
    pair: int = 0

    def __post_init__(self):
        if self.pair not in (0, 1, 2):
            raise ValueError(f"pair must be 0, 1 or 2, not {self.pair}")
        if self.pair == 1 and self.tma:
            raise ValueError("pair=1 gathers weight rows with pointer loads: not with TMA")
        if self.pair == 2 and self.tma and 2 * self.block_n > 256:
            raise ValueError(f"pair=2 with TMA loads 2*BLOCK_N = {2 * self.block_n} weight rows "
                             "per tile; a TMA box holds at most 256")

    @property
    def tail(self) -> int:
        return self.tail_m or self.block_m

    def label(self) -> str:
        out = (f"BM{self.block_m}-BN{self.block_n}-BK{self.block_k}-"
               f"w{self.num_warps}-s{self.num_stages}")
        if self.tail < self.block_m:
            out += f"-t{self.tail}"
        if self.attach_m:
            out += f"-a{self.attach_m}"
        if self.pair:
            out += ("", "-pg", "-pp")[self.pair]
        return out + ("-tma" if self.tma else "")


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
# Prefill: hundreds of rows per expert, 128-row tensor-core tiles with two warpgroups. The
# winners of sweeps on one H200 (docs/measurements/2026-12-03-h200x1-expert-prefill.md and
# 2026-12-03-h200x1-expert-prefill-pairs.md): 32 rows attached to the last full block for
# ~100-160 rows per expert (DeepSeek-V3), 32-row tails for ~220-290 (Qwen3-235B); gate and up
# as one 256-column product over the packed w13 (one m64n256 instruction per warpgroup instead
# of two m64n128 reading the same rows). The gathered pairs (no weight copy) follow each.
# 64-column gate/up tiles, two programs per SM, 256-row blocks and a warp-specialized loop
# were slower in every case tried.
PREFILL_UP_CONFIGS = (   # gate/up: 128 gate and 128 up columns per tile
    Config(128, 128, 64, 8, 4, attach_m=32, tma=True, pair=2),
    Config(128, 128, 64, 8, 4, tail_m=32, tma=True, pair=2),
    Config(128, 128, 64, 8, 4, attach_m=32, pair=1),
    Config(128, 128, 64, 8, 4, tail_m=32, pair=1),
)
PREFILL_DOWN_CONFIGS = (
    Config(128, 256, 64, 8, 4, attach_m=32, tma=True), Config(128, 256, 64, 8, 4, attach_m=32),
    Config(128, 256, 64, 8, 4, tail_m=32, tma=True), Config(128, 256, 64, 8, 4, tail_m=32),
    Config(128, 256, 64, 8, 3, tail_m=32),
)
PREFILL_CONFIGS = PREFILL_UP_CONFIGS + PREFILL_DOWN_CONFIGS


def candidates(rows: int, experts: int, swiglu: bool = True) -> tuple[Config, ...]:
    """The configurations worth trying for rows spread over experts (swiglu: the gate/up GEMM)."""
    per_expert = rows / max(experts, 1)
    if per_expert <= 16:
        return DECODE_CONFIGS
    if per_expert <= 48:
        return MID_CONFIGS
    return PREFILL_UP_CONFIGS if swiglu else PREFILL_DOWN_CONFIGS
