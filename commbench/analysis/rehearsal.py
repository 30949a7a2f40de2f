"""Rows measured with several ranks on one GPU (``ranks_per_gpu`` > 1): a rehearsal.

Such a run proves that every rank got the right answer and that the multi-rank code paths ran;
its times are the GPU time-sliced between processes (NCCL's kernels wait for peers that are not
running), so report, compare, accept and the parity tools never present them as performance.
"""
from __future__ import annotations

import math

import pandas as pd

COLUMN = "ranks_per_gpu"


def ranks_per_gpu(value) -> int:
    """The number of ranks that shared a row's GPU (0 when the row says nothing: no GPU, old run)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return 0
    return int(v) if math.isfinite(v) else 0


def shared_mask(results: pd.DataFrame) -> pd.Series:
    """True for each row whose GPU was shared by several ranks."""
    if COLUMN not in results.columns:
        return pd.Series(False, index=results.index)
    return pd.to_numeric(results[COLUMN], errors="coerce").fillna(0) > 1


def shared_reason(n: int) -> str:
    """Why a shared-GPU time is no performance number (one sentence for every tool)."""
    return (f"{n} ranks shared one GPU (ranks_per_gpu {n}): a correctness rehearsal, its times are "
            f"the GPU time-sliced between processes, not speed")


SPEED_SUFFIXES = ("_us", "_gbps", "_per_s", "_pct", "_ratio")


def is_speed_metric(metric: str) -> bool:
    """A column made of times (time_us and its min/p90/max, busbw_gbps, tokens_per_s, overlap_pct,
    pct_of_bound, ...), which a shared GPU makes meaningless; wrong, counts and bytes stay meaningful."""
    return metric.endswith(SPEED_SUFFIXES) or metric.startswith(("time_us", "pct_of_"))
