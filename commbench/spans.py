"""Time spans (start, end): merged, measured, subtracted and clipped. What a step's split
(measure/step_split.py) and the trace's exposed-communication track (profile/step_tracks.py)
both count with, so the two agree to the microsecond."""
from __future__ import annotations

from collections.abc import Iterable

Span = tuple[float, float]


def union(spans: Iterable[Span]) -> list[Span]:
    """Sorted, disjoint spans covering the same time (empty spans dropped)."""
    out: list[list[float]] = []
    for start, end in sorted((float(s), float(e)) for s, e in spans if e > s):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def length(spans: Iterable[Span]) -> float:
    return sum(e - s for s, e in union(spans))


def subtract(spans: Iterable[Span], minus: Iterable[Span]) -> list[Span]:
    """The parts of ``spans`` outside ``minus`` (both merged first)."""
    cuts = union(minus)
    out: list[Span] = []
    for start, end in union(spans):
        cur = start
        for cs, ce in cuts:
            if ce <= cur:
                continue
            if cs >= end:
                break
            if cs > cur:
                out.append((cur, cs))
            cur = max(cur, ce)
            if cur >= end:
                break
        if cur < end:
            out.append((cur, end))
    return out


def clip(spans: Iterable[Span], start_us: float, end_us: float) -> list[Span]:
    return [(max(s, start_us), min(e, end_us)) for s, e in spans if e > start_us and s < end_us]


def spans_of(intervals: Iterable[dict], *kinds: str) -> list[Span]:
    """The (start_us, end_us) of the classified intervals of the given kinds."""
    return [(iv["start_us"], iv["end_us"]) for iv in intervals if iv["kind"] in kinds]
