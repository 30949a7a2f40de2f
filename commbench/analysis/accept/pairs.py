"""Pairwise rounds compared with each other: the pairs slower than the others at the same point.

A rule's floor needs a number that holds on the machine under test; comparing the pairs with
each other needs none. A slow node makes every pair it is in slower than the pairs without it,
a slow link makes its one pair slower. Per measured point (bench, op, backend, variant, dtype,
size) the reference is the median time of the fastest third of the pairs (at least one pair):
with n >= 3 nodes a bad node is in 2/n of the pairs, so the fastest third are healthy pairs.

A pair is slow at a point when it is at least ``min_excess_pct`` and ``min_excess_us`` slower
than the reference, and slow in a bench when so in at least ``min_share`` of the bench's points.
The time floor keeps jitter of a few tens of microseconds (a rank losing its core for a moment)
from counting as a slow link where a small message takes a few microseconds. Per bench, because a
bench groups like points: a lower rate shows at large sizes, a longer per-packet delay at small
ones, so a suite measures the two in two benches (suites/acceptance-multinode-cpu.yaml).
"""
from __future__ import annotations

from ...runfolder.schema import PLACED_POINT_KEY

import pandas as pd

from commbench.units import format_size

MIN_PAIRS = 3  # fewer pairs have no majority of healthy ones to compare with
COLUMNS = ["hosts", "pair", "bench", "points", "slow_points", "share", "median_excess_pct", "worst_point",
           "worst_excess_pct", "flagged"]


def pair_key(hosts: str) -> tuple[str, ...]:
    """'a,b' (the rows' ``hosts``) -> ('a', 'b'), the key blame_pairs uses."""
    return tuple(sorted(str(hosts).split(",")))


def _point_label(key: dict) -> str:
    size = key.get("size_bytes")
    parts = [key.get("bench"), key.get("op"), key.get("backend"),
             None if key.get("variant") in (None, "", "default") else key.get("variant"),
             format_size(int(size)) if pd.notna(size) else None]
    return " ".join(str(p) for p in parts if p is not None and str(p) != "nan")


def compare_pairs(pair_rows: pd.DataFrame, metric: str, min_excess_pct: float, min_share: float,
                  min_excess_us: float = 0.0) -> pd.DataFrame:
    """One row per (pair, bench): how many of its points are ``min_excess_pct`` (and
    ``min_excess_us``) slower than the
    fastest third of the pairs, the median excess, the worst point, and whether it is flagged."""
    if pair_rows.empty or metric not in pair_rows.columns:
        return pd.DataFrame(columns=COLUMNS)
    ok = pair_rows[pair_rows["status"] == "ok"].copy() if "status" in pair_rows else pair_rows.copy()
    ok["_t"] = pd.to_numeric(ok[metric], errors="coerce")
    ok = ok.dropna(subset=["_t"])
    keys = [k for k in PLACED_POINT_KEY if k in ok.columns]
    recs = []
    for key, g in ok.groupby(keys, dropna=False):
        per_pair = g.groupby("hosts")["_t"].median()
        if len(per_pair) < MIN_PAIRS:
            continue
        fastest = per_pair.sort_values().iloc[: max(1, len(per_pair) // 3)]
        reference = float(fastest.median())
        if reference <= 0:
            continue
        point = _point_label(dict(zip(keys, key if isinstance(key, tuple) else (key,))))
        bench = g["bench"].iloc[0] if "bench" in g else ""
        for hosts, t in per_pair.items():
            excess = (float(t) / reference - 1.0) * 100.0
            recs.append({"hosts": ",".join(pair_key(hosts)), "bench": bench, "point": point,
                         "excess_pct": excess,
                         "slow": excess >= min_excess_pct and float(t) - reference >= min_excess_us})
    if not recs:
        return pd.DataFrame(columns=COLUMNS)
    per_point = pd.DataFrame(recs)
    out = []
    for (hosts, bench), g in per_point.groupby(["hosts", "bench"], sort=True):
        worst = g.loc[g["excess_pct"].idxmax()]
        share = float(g["slow"].mean())
        out.append({"hosts": hosts, "pair": "-".join(pair_key(hosts)), "bench": bench,
                    "points": len(g), "slow_points": int(g["slow"].sum()),
                    "share": round(share, 2), "median_excess_pct": round(float(g["excess_pct"].median()), 1),
                    "worst_point": worst["point"], "worst_excess_pct": round(float(worst["excess_pct"]), 1),
                    "flagged": share >= min_share})
    return pd.DataFrame(out, columns=COLUMNS)


def slow_pair_reasons(table: pd.DataFrame, metric: str) -> dict[tuple[str, ...], str]:
    """Flagged pairs -> why, e.g. 'pair-bandwidth: 4/4 points slower (median +870% time_us_min)'."""
    reasons: dict[tuple[str, ...], str] = {}
    for rec in table[table["flagged"]].to_dict("records") if not table.empty else []:
        key = pair_key(rec["hosts"])
        text = (f"{rec['bench']}: {rec['slow_points']}/{rec['points']} points slower than the fastest "
                f"pairs (median {rec['median_excess_pct']:+.0f}% {metric}, worst {rec['worst_point']} "
                f"{rec['worst_excess_pct']:+.0f}%)")
        reasons[key] = f"{reasons[key]}; {text}" if key in reasons else text
    return reasons


def as_findings(table: pd.DataFrame) -> pd.DataFrame:
    """The pair table in the shape of the localisation findings (level 'pair')."""
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame({"level": "pair", "name": table["pair"] + " (" + table["bench"].astype(str) + ")",
                         "cases": table["points"], "slow_cases": table["slow_points"],
                         "share": table["share"], "median_excess_pct": table["median_excess_pct"],
                         "median_z": float("nan"), "flagged": table["flagged"]})
