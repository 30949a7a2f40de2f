"""Pure bandwidth formulas, exactly as nccl-tests (see docs/metrics.md). GB = 1e9 bytes.

``size_bytes`` follows nccl-tests semantics: all_gather and reduce_scatter take
the whole (gathered / scattered) buffer, alltoall the per-rank send buffer.
"""
from __future__ import annotations


from .dtypes import BYTES as DTYPE_BYTES
from .comm.ops import OPS

__all__ = ["DTYPE_BYTES", "COLLECTIVE_OPS", "element_count", "bus_factor", "algbw_bytes", "gbps",
           "busbw_gbps", "percentile", "summarize", "RANK_TIMES", "reduce_ranks"]

COLLECTIVE_OPS = tuple(OPS)


def element_count(op: str, size_bytes: int, elem_bytes: int, world_size: int) -> int:
    """nccl-tests' ``count``: elements per rank in the op's own terms.

    A chunked op (all_gather / reduce_scatter / alltoall): the per-rank chunk (size / elem / n);
    every other op: the whole buffer.
    """
    total = size_bytes // elem_bytes
    return total // world_size if OPS[op].chunked else total


def bus_factor(op: str, world_size: int) -> float:
    """busbw / algbw for a collective on ``world_size`` ranks (nccl-tests GetBw)."""
    if op not in OPS:
        raise ValueError(f"no bus factor for op {op!r}")
    return OPS[op].bus_factor(world_size)


def algbw_bytes(op: str, count: int, elem_bytes: int, world_size: int) -> int:
    """Bytes that algbw divides by time: count*ts, times n for a chunked op."""
    return count * elem_bytes * (world_size if OPS[op].chunked else 1)


def gbps(num_bytes: float, time_us: float) -> float:
    """Bytes over microseconds in GB/s (1e9 bytes per second)."""
    if time_us <= 0:
        return 0.0
    return num_bytes / (time_us * 1e-6) / 1e9


def busbw_gbps(op: str, size_bytes: int, elem_bytes: int, world_size: int, time_us: float) -> float:
    count = element_count(op, size_bytes, elem_bytes, world_size)
    return gbps(algbw_bytes(op, count, elem_bytes, world_size), time_us) * bus_factor(op, world_size)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (q in 0..100), as numpy's default."""
    if not values:
        return float("nan")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(times_us: list[float]) -> dict[str, float]:
    """median / min / p90 / p99 / max of per-iteration times (already reduced over the ranks)."""
    import statistics   # here, not at the top: `validate` and `--help` never need it

    return {
        "time_us": statistics.median(times_us),
        "time_us_min": min(times_us),
        "time_us_p90": percentile(times_us, 90),
        "time_us_p99": percentile(times_us, 99),
        "time_us_max": max(times_us),
    }


# How one iteration's per-rank times become the row's (the `rank_time` parameter, nccl-tests -a):
# the slowest rank (commbench's default; nccl-tests -a 3), their mean (-a 1, nccl-tests' default),
# the fastest (-a 2) or rank 0's (-a 0).
RANK_TIMES = {"max": max, "avg": lambda ts: sum(ts) / len(ts), "min": min, "rank0": lambda ts: ts[0]}


def reduce_ranks(per_rank: list[list[float]], how: str = "max") -> list[float]:
    """Per iteration, the ranks' times reduced by ``how`` (RANK_TIMES); iterations beyond the
    shortest rank's list are dropped."""
    if how not in RANK_TIMES:
        raise ValueError(f"rank_time {how!r}: one of {', '.join(RANK_TIMES)}")
    fn = RANK_TIMES[how]
    return [fn(vals) for vals in zip(*per_rank)]
