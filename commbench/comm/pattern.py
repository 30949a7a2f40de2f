"""Verifiable non-zero data: rank r's element i is small and exact in every dtype.

value(r, i) = (r mod 13) + (i mod 7) + 1, an integer in 1..20. Sums over up to
a few ranks stay exact in bf16/fp16; the check allows a relative error only
where the expected value is beyond the dtype's exact-integer range.
Works on numpy arrays and torch tensors alike (``xp`` is the array module).
"""
from __future__ import annotations

from ..dtypes import DTYPES


def values(rank, index):
    """Element values for ``rank`` at integer positions ``index`` (array); rank may be an array too."""
    return (rank % 13) + (index % 7) + 1


def reduce_expected(op_name: str, n: int, index):
    """Expected reduction over ranks 0..n-1 of values(r, index)."""
    base = index % 7 + 1
    ranks = [r % 13 for r in range(n)]
    if op_name == "sum":
        return base * n + sum(ranks)
    if op_name == "max":
        return base + max(ranks)
    if op_name == "min":
        return base + min(ranks)
    raise ValueError(op_name)


def tolerance(dtype: str, max_abs_expected: float) -> float:
    """0 when every expected value is exact in dtype, else a relative tolerance."""
    exact_below = DTYPES[dtype].exact_below if dtype in DTYPES else 2**24
    if max_abs_expected < exact_below:
        return 0.0
    return {"bfloat16": 1e-2, "float16": 1e-3}.get(dtype, 1e-6)
