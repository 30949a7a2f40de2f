"""Naming from outcomes, shared by the search planner (placement/search_plan.py) and accept's
localisation (analysis/accept/): a robust z-score, and the node common to every failing pair."""
from __future__ import annotations

import pandas as pd

# 0.6745 makes the MAD a consistent estimate of the standard deviation for normal data.
_MAD_SCALE = 0.6745
# MAD floor as a fraction of the median: identical healthy nodes would otherwise give z = inf.
_MAD_FLOOR = 0.01


def robust_z(values: pd.Series) -> pd.Series:
    """(x - median) / MAD, scaled; MAD floored at 1% of the median."""
    med = float(values.median())
    mad = float((values - med).abs().median())
    mad = max(mad, _MAD_FLOOR * abs(med), 1e-12)
    return _MAD_SCALE * (values - med) / mad


def blame_pairs(results: dict[tuple[str, str], bool]) -> dict:
    """From pair -> passed: the node common to all failing pairs, else the failing links."""
    failing = [tuple(sorted(p)) for p, ok in results.items() if not ok]
    if not failing:
        return {"node": None, "links": [], "why": "every pair passed"}
    common = set(failing[0]).intersection(*map(set, failing[1:]))
    nodes = {n for p in results for n in p}
    for node in sorted(common):
        # a bad node fails with (nearly) every partner; one failing pair alone is a link
        partners = sum(1 for p in results if node in p)
        if len(failing) >= 2 or partners == 1 or len(nodes) == 2:
            return {"node": node, "links": failing,
                    "why": f"{node} is in all {len(failing)} failing pair(s)"}
    return {"node": None, "links": failing,
            "why": "no node is common to every failing pair: suspect the listed links"}
