"""Name the slow node or GPU: per-rank samples, per-host rows, and pairwise rounds.

Three views, all from stored data:
- ``slow_from_samples``: within each Case, a host (or rank) whose times exceed
  the median of the others by ``min_excess_pct`` in at least ``min_share`` of
  the Cases it takes part in. This names a node when per-rank times differ:
  per-node runs, point-to-point and one-sided ops, or a GPU slow at its own
  part of the work. A synchronising collective equalises ranks' times, so a
  slow link there shows up in the per-node and pairwise rounds instead.
- ``host_outliers``: rows from per-node runs (a ``host`` column) compared by a
  robust z-score (median and MAD) of one metric across hosts.
Pairwise rounds are judged elsewhere: ``round_robin_pairs`` (commbench.sysinfo.hosts) makes a
schedule where every pair of nodes meets once, and ``blame_pairs`` (commbench.placement.blame) names
the node common to every failing pair, or the failing link.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...placement.blame import robust_z
from .rules import LocalizeSettings


def _level_stats(samples: pd.DataFrame, unit: str, settings: LocalizeSettings) -> pd.DataFrame:
    """Per unit (host or rank) over Cases: how often and how much slower than the others."""
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


def slow_from_samples(samples: pd.DataFrame, ok_case_ids=None,
                      settings: LocalizeSettings = LocalizeSettings()) -> pd.DataFrame:
    """Findings per host (when >= 2 hosts) and per rank: level, name, share, excess, flagged."""
    if samples.empty:
        return pd.DataFrame()
    s = samples
    if ok_case_ids is not None:
        s = s[s["case_id"].isin(set(map(str, ok_case_ids)))]
    frames = []
    if s["host"].nunique() >= 2:
        hosts = _level_stats(s, "host", settings)
        if not hosts.empty:
            hosts.insert(0, "level", "host")
            frames.append(hosts.rename(columns={"host": "name"}))
    if s["rank"].nunique() >= 2:
        ranks = _level_stats(s, "rank", settings)
        if not ranks.empty:
            where = s.drop_duplicates("rank").set_index("rank")
            ranks["name"] = [f"rank {r} ({where.at[r, 'host']} gpu {where.at[r, 'gpu']})"
                             for r in ranks["rank"]]
            ranks.insert(0, "level", "rank")
            frames.append(ranks.drop(columns=["rank"]))
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    out["median_excess_pct"] = out["median_excess_pct"].round(1)
    out["median_z"] = out["median_z"].round(2)
    out["share"] = out["share"].round(2)
    return out[["level", "name", "cases", "slow_cases", "share", "median_excess_pct", "median_z",
                "flagged"]]


def host_outliers(results: pd.DataFrame, metric: str = "busbw_gbps", higher_is_better: bool = True,
                  z_threshold: float = 3.5) -> pd.DataFrame:
    """Rows of per-node runs (column 'host'): robust z of metric across hosts per point."""
    if "host" not in results.columns:
        return pd.DataFrame()
    ok = results[results["status"] == "ok"]
    keys = [k for k in ("op", "backend", "variant", "dtype", "size_bytes") if k in ok.columns]
    recs = []
    for _key, g in ok.groupby(keys):
        per_host = g.groupby("host")[metric].median()
        if len(per_host) < 3:
            continue  # robust z needs a majority to define "normal"
        z = robust_z(per_host) * (-1 if higher_is_better else 1)  # positive z = worse
        for host, zv in z.items():
            recs.append({"host": host, "z": float(zv)})
    if not recs:
        return pd.DataFrame()
    out = pd.DataFrame(recs).groupby("host")["z"].median().rename("median_z").reset_index()
    out["flagged"] = out["median_z"] >= z_threshold
    return out
