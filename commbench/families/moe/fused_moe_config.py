"""Tile configurations of the fused MoE expert kernel, and which ones the tuner tries per shape."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    """One launch setting. ``tail_m``: the smallest row block; an expert's rows are covered by
    full BLOCK_M blocks and then tail blocks of tail_m * 2^j rows (at most one of each size),
    so it pads fewer than tail_m rows (0: tail_m = block_m, every block BLOCK_M rows).
    ``grouped``: an expert's row blocks take each column tile in turn (so they read each
    weight tile at about the same time, once from HBM); else each row block runs all its
    column tiles first. ``tma``: load the tiles through tensor descriptors (TMA).
    ``attach_m``: an expert's last full block also takes up to attach_m leftover rows (one
    weight read for both; fused_moe_blocks). ``ws``: warp-specialized K loop (TMA only)."""
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    tail_m: int = 0
    grouped: bool = True
    tma: bool = False
    attach_m: int = 0
    ws: bool = False

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
        if not self.grouped:
            out += "-rowmajor"
        return out + ("-tma" if self.tma else "") + ("-ws" if self.ws else "")


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
