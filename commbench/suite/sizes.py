"""A benchmark's `sizes`: one size, a list, or a sweep ``{min, max, factor}`` / ``{min, max, step}``,
parsed into the byte counts its Cases measure (docs/suites.md, "Sizes"). A sweep longer than the
suite may hold is refused before it is built; a value that would quietly mean something else (a
factor of .nan or .inf, both factor and step, a lower-case b) is refused with the line."""
from __future__ import annotations

import math

from ..units import format_size, parse_size
from .limits import MAX_SIZE_BYTES, SuiteLimits, factor_sweep_points
from .schema import SuiteErrors, as_list

SWEEP_KEYS = ("min", "max", "factor", "step")


def expand_sizes(spec, err: SuiteErrors, line: int, where: str, budget: SuiteLimits | None = None) -> list[int]:
    """Sizes from a single value, a list, or a {min, max, factor|step} sweep (a sweep longer than
    ``budget`` allows is refused before it is built); problems go to ``err`` (then [])."""
    budget = budget or SuiteLimits()
    try:
        if isinstance(spec, dict):
            return _sweep(spec, budget)
        return _listed(spec)
    except KeyError as exc:
        err.add(line, where, f"missing {exc.args[0]!r}")
    except ValueError as exc:
        err.add(line, where, str(exc))
    return []


def _listed(spec) -> list[int]:
    sizes = [parse_size(v) for v in as_list(spec)]
    if not sizes:
        raise ValueError("no sizes given")
    _below_largest(max(sizes), "")
    if len(set(sizes)) != len(sizes):
        raise ValueError("the same size is listed twice")
    return sizes


def _below_largest(num_bytes: int, what: str) -> None:
    if num_bytes > MAX_SIZE_BYTES:
        raise ValueError(f"{what}{format_size(num_bytes)}{')' if what else ''} is above the largest size, "
                         f"{format_size(MAX_SIZE_BYTES)} (no device holds more)")


def _sweep(spec: dict, budget: SuiteLimits) -> list[int]:
    unknown = set(spec) - set(SWEEP_KEYS)
    if unknown:
        raise ValueError(f"unknown key(s) {sorted(map(str, unknown))}: use min, max, factor or step")
    if "factor" in spec and "step" in spec:
        raise ValueError("give factor (a geometric sweep) or step (a linear one), not both: with both, "
                         "one of them would be ignored")
    lo, hi = parse_size(spec.get("min", 0)), parse_size(spec["max"])
    if lo > hi:
        raise ValueError(f"min ({format_size(lo)}) is above max ({format_size(hi)})")
    _below_largest(hi, "max (")
    if "step" in spec:
        return _linear(lo, hi, parse_size(spec["step"]), budget)
    return _geometric(lo, hi, spec.get("factor", 2), budget)


def _linear(lo: int, hi: int, step: int, budget: SuiteLimits) -> list[int]:
    if step <= 0:
        raise ValueError("step must be > 0")
    refusal = budget.sizes_refusal(len(range(lo, hi + 1, step)))
    if refusal:
        raise ValueError(refusal)
    return list(range(lo, hi + 1, step))


def _geometric(lo: int, hi: int, factor, budget: SuiteLimits) -> list[int]:
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not math.isfinite(factor) \
            or factor <= 1:
        raise ValueError(f"factor must be a finite number > 1, got {factor!r}")
    if lo <= 0:
        raise ValueError("min must be > 0 for a factor sweep")
    refusal = budget.sizes_refusal(factor_sweep_points(lo, hi, factor))
    if refusal:
        raise ValueError(refusal)
    out, s = [], float(lo)
    while s <= hi * (1 + 1e-9):
        out.append(int(round(s)))
        s *= factor
    return sorted(set(out))  # a small factor can round two steps to one size
