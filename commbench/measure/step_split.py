"""Where a step's time goes, from its timeline: pure functions over classified intervals.

An interval is ``{kind, stream, start_us, end_us, name}`` with kind ``comm`` (collectives,
peer copies, a family's own communication kernels), ``copy`` (local memory copies and sets) or
``compute`` (every other kernel). Over a step's window [start_us, end_us):

- ``comm_us``: the union of the comm intervals (two streams of communication at once count once);
- ``compute_us``: the union of the compute and copy intervals (the rank's own work; a local copy
  is work the step needs, not waiting); ``copy_us``: the union of the copy intervals alone;
- ``exposed_comm_us``: communication with none of that work beside it (comm minus compute);
- ``overlap_pct``: 100 (comm - exposed) / comm, None when there is no communication;
- ``idle_us``: the window with neither work nor communication running (launch gaps, host waits).

So ``compute_us + exposed_comm_us + idle_us == step_us`` exactly (up to float rounding), and
``0 <= exposed_comm_us <= comm_us``. ``invariant_problems`` checks those on a finished row.

A row's split is the slowest rank's mean step, the critical path of a step whose ranks meet in
collectives; ``shares`` gives each part's share of it (``compute_share_pct``,
``exposed_share_pct``, ``idle_share_pct``, summing to 100).

The timeline is recorded on a batch of its own, after the timed one (the profiler's cost must not
land in ``time_us``), capped at ``PROFILED_STEPS`` steps: the split is a mean per step, so a few
steps give it, while the trace a profiler keeps, exports and parses grows with every step.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..spans import Span, clip, length, spans_of, subtract, union

KINDS = ("comm", "copy", "compute")
# the most steps a profiled batch runs (see the module's docstring)
PROFILED_STEPS = 5
SPLIT_COLUMNS = ("step_us", "compute_us", "comm_us", "copy_us", "exposed_comm_us", "overlap_pct", "idle_us")
# the parts of the step (they sum to step_us) -> their share columns
SHARE_COLUMNS = {"compute_us": "compute_share_pct", "exposed_comm_us": "exposed_share_pct",
                 "idle_us": "idle_share_pct"}
# how far the shares' sum may be from 100 (they are rounded only by float arithmetic)
SHARE_TOLERANCE_PCT = 0.5
# the identity's tolerance: the larger of an absolute floor and a share of the step
TOLERANCE_US = 2.0
TOLERANCE_FRAC = 0.005


def split_window(intervals: Sequence[dict], start_us: float, end_us: float) -> dict:
    """The split of one step window (see the module's docstring) from classified intervals."""
    step = max(0.0, float(end_us) - float(start_us))
    comm = union(clip(spans_of(intervals, "comm"), start_us, end_us))
    work = union(clip(spans_of(intervals, "compute", "copy"), start_us, end_us))
    copy = union(clip(spans_of(intervals, "copy"), start_us, end_us))
    comm_us, compute_us = length(comm), length(work)
    exposed = length(subtract(comm, work))
    busy = length(comm + work)
    return {"step_us": step, "compute_us": compute_us, "comm_us": comm_us, "copy_us": length(copy),
            "exposed_comm_us": exposed,
            "overlap_pct": 100.0 * (comm_us - exposed) / comm_us if comm_us > 0 else None,
            "idle_us": max(0.0, step - busy)}


def split_steps(intervals: Sequence[dict], windows: Sequence[Span]) -> list[dict]:
    """One split per step window."""
    return [split_window(intervals, s, e) for s, e in windows]


def mean_split(splits: Sequence[dict]) -> dict:
    """The mean step of a rank: means of the additive columns (so the identity still holds),
    overlap from the mean comm and exposed."""
    if not splits:
        return {}
    n = len(splits)
    out = {k: sum(s[k] for s in splits) / n for k in SPLIT_COLUMNS if k != "overlap_pct"}
    out["overlap_pct"] = (100.0 * (out["comm_us"] - out["exposed_comm_us"]) / out["comm_us"]
                          if out["comm_us"] > 0 else None)
    return out


def profiled_steps(iters: int) -> int:
    """How many steps a profiled batch runs for a Case of ``iters`` timed steps."""
    return max(1, min(int(iters), PROFILED_STEPS))


def shares(split: dict) -> dict:
    """Each part's share of the step in percent (empty for a step of no length)."""
    step = split.get("step_us") or 0.0
    if step <= 0:
        return {}
    return {share: 100.0 * split[part] / step for part, share in SHARE_COLUMNS.items() if part in split}


def slowest(per_rank: Sequence[dict]) -> tuple[int, dict]:
    """(rank, its mean split with its shares) of the rank with the longest mean step: the
    critical path."""
    rank = max(range(len(per_rank)), key=lambda r: per_rank[r].get("step_us", 0.0))
    return rank, {**per_rank[rank], **shares(per_rank[rank])}


def tolerance_us(step_us: float) -> float:
    return max(TOLERANCE_US, TOLERANCE_FRAC * abs(step_us))


def invariant_problems(row: dict) -> list[str]:
    """What a row's step split breaks (empty when it has none or keeps every invariant):
    0 <= exposed <= comm, 0 <= overlap <= 100, compute + exposed + idle = step (within
    tolerance_us(step))."""
    def num(key):
        v = row.get(key)
        if v is None or isinstance(v, bool):
            return None
        try:
            f = float(v)
        except (TypeError, ValueError):
            return None
        return None if f != f else f   # NaN: an empty cell

    step, comm, compute = num("step_us"), num("comm_us"), num("compute_us")
    exposed, idle, overlap = num("exposed_comm_us"), num("idle_us"), num("overlap_pct")
    out = []
    tol = tolerance_us(step or 0.0)
    if exposed is not None:
        if exposed < -tol:
            out.append(f"exposed_comm_us {exposed:.1f} < 0")
        if comm is not None and exposed > comm + tol:
            out.append(f"exposed_comm_us {exposed:.1f} > comm_us {comm:.1f}")
    if overlap is not None and not -1e-6 <= overlap <= 100 + 1e-6:
        out.append(f"overlap_pct {overlap:.1f} outside 0..100")
    for key in ("comm_us", "compute_us", "idle_us", "copy_us"):
        v = num(key)
        if v is not None and v < -tol:
            out.append(f"{key} {v:.1f} < 0")
    if None not in (step, compute, exposed, idle):
        total = compute + exposed + idle
        if abs(total - step) > tol:
            out.append(f"compute_us + exposed_comm_us + idle_us = {total:.1f} != step_us {step:.1f} "
                       f"(tolerance {tol:.1f} us)")
    pcts = [num(col) for col in SHARE_COLUMNS.values()]
    for col, v in zip(SHARE_COLUMNS.values(), pcts):
        if v is not None and not -SHARE_TOLERANCE_PCT <= v <= 100 + SHARE_TOLERANCE_PCT:
            out.append(f"{col} {v:.1f} outside 0..100")
    if None not in pcts and abs(sum(pcts) - 100) > SHARE_TOLERANCE_PCT:
        out.append(f"the shares sum to {sum(pcts):.2f}, not 100")
    return out
