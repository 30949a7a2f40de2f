"""accept at fleet size: the localisation of slow hosts and ranks from samples, computed for every
Case at once, gives what the Case-by-Case loop gave (the loop is kept here as the reference)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from commbench.analysis.accept.localize import _level_stats, slow_from_samples
from commbench.analysis.accept.rules import LocalizeSettings
from commbench.placement.blame import robust_z


def _loop_level_stats(samples: pd.DataFrame, unit: str, settings: LocalizeSettings) -> pd.DataFrame:
    """The reference: one Case at a time (the implementation before the vectorised one)."""
    recs = []
    for cid, g in samples.groupby("case_id"):
        med = g.groupby(unit)["time_us"].median()
        if len(med) < 2:
            continue
        z = robust_z(med) if len(med) >= 3 else pd.Series(np.nan, index=med.index)
        for name, t in med.items():
            others = float(med.drop(name).median())
            excess = (t / others - 1.0) * 100.0 if others > 0 else 0.0
            recs.append({unit: name, "case_id": cid, "excess_pct": excess, "z": float(z[name]),
                         "slow": excess >= settings.min_excess_pct})
    if not recs:
        return pd.DataFrame()
    per = pd.DataFrame(recs)
    out = per.groupby(unit).agg(cases=("case_id", "nunique"), slow_cases=("slow", "sum"),
                                median_excess_pct=("excess_pct", "median"), median_z=("z", "median"))
    out["share"] = out["slow_cases"] / out["cases"]
    out["flagged"] = out["share"] >= settings.min_share
    return out.reset_index()


def _samples(seed: int) -> pd.DataFrame:
    """Cases of 1 to 7 hosts (2 ranks each), ties included, one slow host."""
    rng = np.random.default_rng(seed)
    recs = []
    for c in range(120):
        hosts = rng.choice([f"h{i}" for i in range(9)], size=int(rng.integers(1, 8)), replace=False)
        for h in hosts:
            for r in range(2):
                for it in range(int(rng.integers(1, 5))):
                    t = float(rng.choice([10.0, 10.0, 12.0])) if c % 5 == 0 else 10.0 * rng.lognormal(0, 0.2)
                    t *= 1.6 if h == "h3" else 1.0
                    recs.append(dict(case_id=f"c{c:03d}", rank=int(h[1:]) * 2 + r, host=str(h), gpu=r,
                                     iteration=it, time_us=t))
    return pd.DataFrame(recs)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("unit", ["host", "rank"])
def test_vectorised_localisation_equals_the_case_by_case_loop(seed, unit):
    samples = _samples(seed)
    settings = LocalizeSettings(min_excess_pct=20, min_share=0.5)
    got, want = _level_stats(samples, unit, settings), _loop_level_stats(samples, unit, settings)
    assert list(got.columns) == list(want.columns) and len(got) == len(want) > 0
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False)


def test_the_slow_host_is_flagged_and_cases_of_one_unit_are_left_out():
    found = slow_from_samples(_samples(4), settings=LocalizeSettings(min_excess_pct=20, min_share=0.5))
    hosts = found[found["level"] == "host"]
    assert list(hosts.loc[hosts["flagged"], "name"]) == ["h3"]
    one = pd.DataFrame(dict(case_id=["a", "a"], rank=[0, 0], host=["x", "x"], gpu=[0, 0], iteration=[0, 1],
                            time_us=[1.0, 2.0]))
    assert _level_stats(one, "host", LocalizeSettings()).empty


def test_the_accept_document_of_a_fleet_shows_the_flagged_lines_and_the_slowest_others():
    from commbench.analysis.accept.verdict import FINDINGS_UNFLAGGED, _findings_shown

    n = 1000
    table = pd.DataFrame({"level": "host", "name": [f"n{i}" for i in range(n)], "median_excess_pct": np.arange(n),
                          "flagged": np.arange(n) % 100 == 0})
    shown = _findings_shown(table)
    assert int(shown["flagged"].sum()) == 10 and len(shown) == 10 + FINDINGS_UNFLAGGED
    assert list(shown[~shown["flagged"]]["name"])[:2] == ["n999", "n998"]
    assert len(_findings_shown(table.head(150))) == 150
