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

from ...runfolder.schema import PLACED_POINT_KEY

import numpy as np
import pandas as pd

from ...placement.blame import _MAD_FLOOR as MAD_FLOOR, _MAD_SCALE as MAD_SCALE, robust_z
from .rules import LocalizeSettings


def _level_stats(samples: pd.DataFrame, unit: str, settings: LocalizeSettings) -> pd.DataFrame:
    """Per unit (host or rank) over Cases: how often and how much slower than the others.

    Per Case, each unit's median time against the median of the other units of that Case (a
    leave-one-out median, read from the Case's sorted medians), and its robust z among them (3 or
    more units). Computed for every Case at once: a fleet's 100,000 Cases cost one sort."""
    med = samples.groupby(["case_id", unit], sort=False)["time_us"].median().dropna().reset_index()
    n = med.groupby("case_id")["time_us"].transform("size").to_numpy()
    med = med[n >= 2]
    if med.empty:
        return pd.DataFrame()
    med = med.sort_values(["case_id", "time_us"], kind="stable").reset_index(drop=True)
    by_case = med.groupby("case_id", sort=False)["time_us"]
    t = med["time_us"].to_numpy(dtype=float)
    n = by_case.transform("size").to_numpy()
    pos = by_case.cumcount().to_numpy()
    others = _median_without(t, np.arange(len(t)) - pos, pos, n)
    excess = np.where(others > 0, (t / np.where(others > 0, others, 1.0) - 1.0) * 100.0, 0.0)
    per = pd.DataFrame({unit: med[unit], "case_id": med["case_id"], "excess_pct": excess,
                        "z": _robust_z_per_case(med, by_case, n), "slow": excess >= settings.min_excess_pct})
    out = per.groupby(unit).agg(cases=("case_id", "nunique"), slow_cases=("slow", "sum"),
                                median_excess_pct=("excess_pct", "median"), median_z=("z", "median"))
    out["share"] = out["slow_cases"] / out["cases"]
    out["flagged"] = out["share"] >= settings.min_share
    return out.reset_index()


def _median_without(t: np.ndarray, start: np.ndarray, pos: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The median of each Case's other values: ``t`` sorted within each Case, which starts at
    ``start`` and holds ``n`` values; the value at ``pos`` left out (its n - 1 others, whose
    element k is t[start + k] before pos and t[start + k + 1] from it on)."""
    rest = n - 1
    lo, hi = (rest - 1) // 2, rest // 2

    def other(k: np.ndarray) -> np.ndarray:
        return t[start + k + (k >= pos)]
    return (other(lo) + other(hi)) / 2.0


def _robust_z_per_case(med: pd.DataFrame, by_case, n: np.ndarray) -> np.ndarray:
    """placement.blame.robust_z of each unit's time among its Case's units (NaN under 3 units)."""
    centre = by_case.transform("median")
    mad = (med["time_us"] - centre).abs().groupby(med["case_id"], sort=False).transform("median")
    mad = np.maximum(np.maximum(mad.to_numpy(), MAD_FLOOR * centre.abs().to_numpy()), 1e-12)
    z = MAD_SCALE * (med["time_us"].to_numpy() - centre.to_numpy()) / mad
    return np.where(n >= 3, z, np.nan)


def slow_from_samples(samples: pd.DataFrame, ok_case_ids=None,
                      settings: LocalizeSettings = LocalizeSettings()) -> pd.DataFrame:
    """Findings per host (when >= 2 hosts) and per rank: level, name, share, excess, flagged."""
    if samples.empty:
        return pd.DataFrame()
    s = samples
    if ok_case_ids is not None:
        s = s[s["case_id"].isin(set(map(str, ok_case_ids)))]
    # Cases and hosts as integer codes: 2 M samples are grouped by numbers, not hashed as strings again
    case_codes, _cases = pd.factorize(s["case_id"])
    host_codes, host_names = pd.factorize(s["host"])
    s = pd.DataFrame({"case_id": case_codes, "host": host_codes, "rank": s["rank"].to_numpy(),
                      "gpu": s["gpu"].to_numpy(), "time_us": s["time_us"].to_numpy()})
    frames = []
    if len(host_names) >= 2:
        hosts = _level_stats(s, "host", settings)
        if not hosts.empty:
            hosts["host"] = host_names[hosts["host"].to_numpy()]
            hosts.insert(0, "level", "host")
            frames.append(hosts.rename(columns={"host": "name"}))
    if s["rank"].nunique() >= 2:
        ranks = _level_stats(s, "rank", settings)
        if not ranks.empty:
            where = s.drop_duplicates("rank").set_index("rank")
            ranks["name"] = [f"rank {r} ({host_names[where.at[r, 'host']]} gpu {where.at[r, 'gpu']})"
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
    keys = [k for k in PLACED_POINT_KEY if k in ok.columns]
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
