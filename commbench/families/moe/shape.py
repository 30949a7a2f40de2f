"""What a moe Case's size and hidden mean, without torch: `validate` and planning use it."""
from __future__ import annotations

FP8_BLOCK = 128          # channels per FP8 scale (DeepEP's per-128-channel scaling)


def tokens_for(size_bytes: int, hidden: int) -> int:
    """size_bytes is the per-rank BF16 input, tokens * hidden * 2 (whatever the dispatch dtype)."""
    return size_bytes // (2 * hidden)


def shape_problem(size_bytes: int, hidden: int, dtype: str) -> tuple[str, str] | None:
    """Why a (size, hidden, dtype) cannot run, as (suite field to blame, reason), or None."""
    if hidden <= 0 or hidden % 8:
        return ("params.hidden", f"hidden must be a positive multiple of 8, got {hidden}")
    if size_bytes <= 0 or size_bytes % (2 * hidden):
        return ("sizes", f"size_bytes ({size_bytes}) must be tokens * hidden * 2 "
                         f"(the per-rank BF16 input) with hidden={hidden}")
    if dtype == "float8_e4m3" and hidden % FP8_BLOCK:
        return ("params.hidden", f"FP8 dispatch needs hidden to be a multiple of {FP8_BLOCK}, got {hidden}")
    return None
