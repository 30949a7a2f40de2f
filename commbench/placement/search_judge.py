"""How a search judges one group's launch from its rows, to choose the next wave.

A group fails when any of its rows is not ok (``failed``, ``timeout``, ``wrong`` or wrong > 0),
or when it is slow against its peers: per measured point (bench, op, backend, variant, dtype,
size) and group size, the group's ``metric`` is compared with the median of the best third of
every group of that size measured so far in the search (this wave's included; at least one
group). A point is slow when worse than that reference by ``max_excess_pct`` or more, and the
group is slow when at least ``min_share`` of its points are. The comparison needs 3 groups of the
size at the point (a majority of healthy ones); with fewer, the groups of that size and larger
stand in (a larger group is no faster at a time, nor better at a rate: the comparison can only
miss, never blame wrongly), and with fewer than 3 of those, only the rows' status judges. Like
accept's pairwise comparison (analysis/accept/pairs.py), no floor that holds on the machine under
test is needed: a bad node makes its groups slower than the groups without it.
"""
from __future__ import annotations

from ..runfolder.schema import PLACED_POINT_KEY

import math
import statistics

Group = tuple[str, ...]
MIN_GROUPS = 3
NOT_OK = ("failed", "timeout", "wrong")
UNCOMPARED = "rows ok (too few groups of this size to compare)"


def compared(why: str) -> bool:
    """False for a pass judged on its rows' status alone (no peers): it proves no one good."""
    return why != UNCOMPARED


def higher_is_better(metric: str) -> bool:
    return metric.endswith(("_gbps", "_per_s"))


class GroupJudge:
    """Judges the groups of each wave in turn; remembers every group's values as the reference."""

    def __init__(self, metric: str = "time_us", max_excess_pct: float = 50.0, min_share: float = 0.5):
        self.metric, self.max_excess_pct, self.min_share = metric, float(max_excess_pct), float(min_share)
        self.seen: dict[tuple, list[float]] = {}   # (point, group size) -> each group's value there

    def judge(self, wave: dict[Group, list[dict]]) -> dict[Group, tuple[bool, str]]:
        """Each group of the wave (its rows) -> (passed, why); ``compared(why)`` says whether a
        pass was judged against peers too."""
        values = {g: self._values(g, rows) for g, rows in wave.items()}
        for g, per_point in values.items():
            for key, v in per_point.items():
                self.seen.setdefault((key, len(g)), []).append(v)
        refs: dict[tuple, float | None] = {}   # (point, size) -> reference, computed once a wave
        return {g: self._verdict(g, rows, values[g], refs) for g, rows in wave.items()}

    def _reference(self, key: tuple, size: int) -> float | None:
        """The median of the best third of the groups of ``size`` at point ``key`` (else of the
        groups of that size and larger), or None with fewer than MIN_GROUPS of them."""
        pool = self.seen.get((key, size), [])
        if len(pool) < MIN_GROUPS:
            pool = [x for (k, n), vs in self.seen.items() if k == key and n >= size for x in vs]
        if len(pool) < MIN_GROUPS:
            return None
        pool = sorted(pool, reverse=higher_is_better(self.metric))
        return statistics.median(pool[: max(1, len(pool) // 3)])

    def _values(self, group: Group, rows: list[dict]) -> dict[tuple, float]:
        """The group's metric per point (median over its ok rows there)."""
        by_point: dict[tuple, list[float]] = {}
        for r in rows:
            v = _number(r.get(self.metric))
            if r.get("status") == "ok" and v is not None and not _number(r.get("wrong")):
                by_point.setdefault(tuple(str(r.get(k)) for k in PLACED_POINT_KEY), []).append(v)
        return {k: statistics.median(v) for k, v in by_point.items()}

    def _verdict(self, group: Group, rows: list[dict], values: dict[tuple, float], refs: dict) -> tuple[bool, str]:
        bad = [r for r in rows if r.get("status") in NOT_OK or (_number(r.get("wrong")) or 0) > 0]
        if bad:
            kinds = ", ".join(sorted({str(r.get("status")) for r in bad}))
            return False, f"{len(bad)} of {len(rows)} row(s) not ok ({kinds})"
        if not rows:
            return False, "no rows stored"
        judged, slow, worst = 0, 0, 0.0
        better_high = higher_is_better(self.metric)
        for key, v in values.items():
            if (key, len(group)) not in refs:
                refs[(key, len(group))] = self._reference(key, len(group))
            ref = refs[(key, len(group))]
            if ref is None or ref <= 0 or v <= 0:
                continue
            excess = (ref / v - 1.0 if better_high else v / ref - 1.0) * 100.0
            judged += 1
            worst = max(worst, excess)
            slow += excess >= self.max_excess_pct
        if judged and slow / judged >= self.min_share:
            return False, (f"{self.metric} at least {self.max_excess_pct:g}% worse than the best groups of "
                           f"{len(group)} at {slow} of {judged} point(s) (worst +{worst:.0f}%)")
        if not judged:
            return True, UNCOMPARED
        return True, (f"rows ok; {self.metric} within {self.max_excess_pct:g}% of its peers at {judged - slow} "
                      f"of {judged} point(s)")


def _number(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def gpu_values(samples, ids_by_node: dict[str, set]) -> dict[str, tuple[float, ...]]:
    """Per node alone, each GPU's rate over the node's Cases (1e6 / the sum of its rank's median
    iteration times: higher is better, comparable across nodes that ran the same Cases), from the
    run's per-rank samples (a pandas frame: case_id, host, gpu, time_us); GPUs in index order."""
    out = {}
    for node, ids in ids_by_node.items():
        mine = samples[samples["case_id"].isin(ids)]
        if mine.empty or "gpu" not in mine:
            continue
        per_case = mine.groupby(["gpu", "case_id"])["time_us"].median().groupby(level="gpu").sum()
        values = [1e6 / float(t) for _gpu, t in sorted(per_case.items()) if t and math.isfinite(float(t))]
        if len(values) == len(per_case):
            out[node] = tuple(values)
    return out
