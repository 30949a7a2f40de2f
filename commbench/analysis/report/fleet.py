"""A fleet's view of a placed run (per node, pairs of nodes) over many nodes: what stands out, ranked.

A **unit** is what a launch was placed on: a node (rows whose ``hosts`` is one host) or a pair
(two hosts). A **panel** is one kind of point across the units (bench, op, backend, variant, dtype,
and the run when several): a table with a row per unit and a column per message size (the unit's
median ``metric`` there). Each unit's score and robust z against the others are curve_band's
(median over sizes of log(value / per-size median); z from the median and MAD across units).

Pairs also give each node a score: the median of the scores of the pairs it is in, and a robust z
across nodes (placement/blame.py's, as accept's localisation): a bad node makes all its pairs slow,
a bad link one. GPU health flags come from the run's health records, judged by the default health
rules (sysinfo/health_judge.py), so a node that fails health is listed whatever its timings.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...errors import RunFolderError
from ...placement.blame import robust_z as blame_z
from ...sysinfo.health_judge import HealthRules, failing_gpus
from ..health_view import run_health
from . import curve_band

MIN_NODES = curve_band.MAX_CURVES + 1   # fewer nodes: one curve each reads fine (the Curves section)
PANEL_KEY = ("run", "bench", "op", "backend", "variant", "dtype")
TOP_ROWS = 40                           # ranked lines shown; the CSV beside the report has them all


@dataclass
class FleetPanel:
    label: str          # 'all_reduce nccl' (+ bench, variant, dtype, run where they vary)
    unit: str           # node | pair
    metric: str         # busbw_gbps (higher is better) or time_us
    table: pd.DataFrame  # unit x size_bytes -> median metric
    scores: pd.DataFrame  # curve_band.curve_scores(table)

    @property
    def speed(self) -> pd.Series:
        """Each unit's speed relative to the others (1.0: typical, 0.5: half as fast)."""
        r = self.scores["median_ratio"]
        return r if self.metric != "time_us" else 1.0 / r


def placed_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The ok rows placed on one or two hosts, with ``unit`` (node or pair) and ``n_hosts``."""
    if rows.empty or "hosts" not in rows.columns or "size_bytes" not in rows.columns:
        return rows.iloc[0:0]
    ok = rows[rows["status"].astype(str).eq("ok")] if "status" in rows.columns else rows
    hosts = ok["hosts"].fillna("").astype(str)
    n = hosts.str.count(",") + 1
    keep = hosts.ne("") & n.le(2)
    out = ok[keep].copy()
    out["n_hosts"] = n[keep]
    out["unit"] = np.where(out["n_hosts"] == 1, "node", "pair")
    return out


def fleet_nodes(rows: pd.DataFrame) -> list[str]:
    placed = placed_rows(rows)
    if placed.empty:
        return []
    return sorted(set(",".join(placed["hosts"].astype(str).unique()).split(",")))


def applies(rows: pd.DataFrame) -> bool:
    return len(fleet_nodes(rows)) >= MIN_NODES


def metric_of(rows: pd.DataFrame) -> str:
    """busbw_gbps where the rows have it above 0 (a rate, higher is better), else time_us."""
    if "busbw_gbps" in rows.columns and pd.to_numeric(rows["busbw_gbps"], errors="coerce").gt(0).any():
        return "busbw_gbps"
    return "time_us"


def panels(rows: pd.DataFrame) -> list[FleetPanel]:
    """One FleetPanel per kind of point and unit, with 3 or more units."""
    placed = placed_rows(rows)
    if placed.empty:
        return []
    metric = metric_of(placed)
    placed = placed.assign(_v=pd.to_numeric(placed[metric], errors="coerce"),
                           size_bytes=pd.to_numeric(placed["size_bytes"], errors="coerce"))
    placed = placed[placed["_v"].gt(0) & placed["size_bytes"].notna()]
    keys = [k for k in PANEL_KEY if k in placed.columns]
    varying = [k for k in keys if placed[k].astype(str).nunique() > 1 and k not in ("op", "backend")]
    out = []
    for (unit, *values), part in placed.groupby(["unit", *keys], sort=True, dropna=False):
        table = part.groupby(["hosts", "size_bytes"])["_v"].median().unstack("size_bytes").sort_index(axis=1)
        if len(table) < curve_band.MIN_CURVES_AT_SIZE:
            continue
        named = dict(zip(keys, values))
        label = " ".join(str(named[k]) for k in ("op", "backend") if k in named)
        label += "".join(f" {k}={named[k]}" for k in varying)
        out.append(FleetPanel(label, unit, metric, table, curve_band.curve_scores(table)))
    return out


def node_scores(panel: FleetPanel) -> pd.DataFrame:
    """Per node of a pair panel: its pairs, the median of their scores (as a ratio: ``speed``) and
    a robust z across nodes (blame.robust_z), sorted worst first."""
    score = np.log(panel.speed.dropna())
    pairs = pd.DataFrame({"pair": score.index, "score": score.values})
    ends = pairs["pair"].str.split(",", n=1, expand=True)
    long = pd.concat([pd.DataFrame({"node": ends[0], "score": pairs["score"]}),
                      pd.DataFrame({"node": ends[1], "score": pairs["score"]})])
    per = long.groupby("node")["score"].agg(["median", "size"])
    z = blame_z(per["median"]) if len(per) >= 3 else pd.Series(np.nan, index=per.index)
    out = pd.DataFrame({"pairs": per["size"], "speed": np.exp(per["median"]), "robust_z": z})
    return out.sort_values("speed")


def health_flags(runs) -> dict[str, str]:
    """host -> why its GPUs fail health (default rules), over every run; a damaged health.jsonl
    flags nothing here (the GPU health section says why)."""
    out: dict[str, str] = {}
    for run in runs:
        try:
            view = run_health(run.path)
        except RunFolderError:
            continue
        for host, problems in failing_gpus(view, HealthRules()).items():
            out.setdefault(host, problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""))
    return out


def ranked(panels_: list[FleetPanel], flags: dict[str, str]) -> pd.DataFrame:
    """Every unit that stands out (curve_band's outliers; a pair panel's nodes by their pairs) and
    every node that fails health (once per panel, as a node), ranked: health first, then by
    |robust z|."""
    recs, seen = [], set()
    for p in panels_:
        flagged = curve_band.outliers(p.scores)
        nodes = node_scores(p) if p.unit == "pair" else None
        named = _node_outliers(nodes, flags) if nodes is not None else pd.DataFrame()
        units = [u for u in flagged.index if not set(str(u).split(",")) & set(named.index)]   # folded into its node
        if p.unit == "node":
            units += [u for u in p.scores.index if u in flags and u not in flagged.index]
        for unit in units:
            recs.append(_line(unit, p.unit, p, float(p.speed[unit]), p.scores.loc[unit, "robust_z"], flags))
        seen |= {str(u) for u in p.scores.index if p.unit == "node"}
        if nodes is not None:
            for node, row in named.iterrows():
                slow = sum(1 for u in flagged.index if node in str(u).split(","))
                recs.append(_line(node, f"node ({slow} of its {int(row['pairs'])} pairs outliers)", p,
                                  float(row["speed"]), row["robust_z"], flags))
            seen |= set(nodes.index)
    for host in sorted(set(flags) - seen):   # failed health, and no ok row to score it by
        recs.append({"node or pair": host, "unit": "node", "panel": "", "metric": "", "speed vs others": None,
                     "robust z": None, "health": f"{host}: {flags[host]}"})
    out = pd.DataFrame(recs, columns=["node or pair", "unit", "panel", "metric", "speed vs others", "robust z",
                                      "health"])
    if out.empty:
        return out
    order = out["health"].ne("").astype(int) * 1e6 + out["robust z"].abs().fillna(0)
    out = out.loc[order.sort_values(ascending=False, kind="stable").index].reset_index(drop=True)
    out.insert(0, "rank", range(1, len(out) + 1))
    return out


def _node_outliers(nodes: pd.DataFrame, flags: dict[str, str]) -> pd.DataFrame:
    """The nodes of a pair panel that stand out by their pairs' median, or fail health."""
    z_ok = nodes["robust_z"].abs().ge(curve_band.OUTLIER_Z)
    effect = np.log(nodes["speed"]).abs().ge(np.log1p(curve_band.MIN_EFFECT))
    return nodes[(z_ok & effect) | nodes.index.isin(list(flags))]


def _line(unit, kind: str, p: FleetPanel, speed: float, z, flags: dict[str, str]) -> dict:
    health = "; ".join(f"{h}: {flags[h]}" for h in str(unit).split(",") if h in flags)
    return {"node or pair": str(unit), "unit": kind, "panel": p.label, "metric": p.metric,
            "speed vs others": round(speed, 3), "robust z": round(float(z), 1) if z == z else None,
            "health": health}


def drawn_curves(p: FleetPanel, flags: dict[str, str]) -> list[tuple[str, pd.Series]]:
    """The curves a distribution panel draws over its boxes, at most curve_band.MAX_LABELLED: of a
    pair panel, each named node (the median of its pairs per size) and then the outlier pairs
    not folded into one; of a node panel, its outliers."""
    flagged = curve_band.outliers(p.scores)
    out = []
    if p.unit == "pair":
        named = _node_outliers(node_scores(p), flags)
        ends = pd.Series(p.table.index, index=p.table.index).str.split(",", n=1, expand=True)
        for node, row in named.iterrows():
            mine = p.table[(ends[0] == node) | (ends[1] == node)]
            health = " [health]" if node in flags else ""
            label = f"{node}{health}: median of its {len(mine)} pairs (x{row['speed']:.2f}, z {row['robust_z']:.1f})"
            out.append((label, mine.median(axis=0)))
        flagged = flagged[[not set(str(u).split(",")) & set(named.index) for u in flagged.index]]
    out += [(curve_band.outlier_label(str(u), row), p.table.loc[u]) for u, row in flagged.iterrows()]
    return out[:curve_band.MAX_LABELLED]


def worst_nodes(p: FleetPanel, nodes: pd.DataFrame, flags: dict[str, str], k: int) -> list[str]:
    """The nodes a pair heatmap names first: those that stand out by their pairs or fail health, the
    two ends of each outlier pair not folded into them (a link), then the slowest by their pairs."""
    named = list(_node_outliers(nodes, flags).index)
    flagged = curve_band.outliers(p.scores)
    ends = [n for u in flagged.index for n in str(u).split(",") if not set(str(u).split(",")) & set(named)]
    return list(dict.fromkeys([*named, *ends, *nodes.index]))[:k]


def pair_matrix(p: FleetPanel) -> pd.DataFrame:
    """node x node relative speed of a pair panel (symmetric; NaN where the pair was not measured)."""
    speed = p.speed.dropna()
    ends = pd.Series(speed.index).str.split(",", n=1, expand=True)
    nodes = sorted(set(ends[0]) | set(ends[1]))
    pos = {n: i for i, n in enumerate(nodes)}
    m = np.full((len(nodes), len(nodes)), np.nan)
    a, b = ends[0].map(pos).to_numpy(), ends[1].map(pos).to_numpy()
    m[a, b] = speed.to_numpy()
    m[b, a] = speed.to_numpy()
    return pd.DataFrame(m, index=nodes, columns=nodes)
