"""Burn-in over time: a run folder's rows of every pass (results.jsonl; results.csv holds only the
last pass), each node's metric per pass, and how it moved: drift (first to last pass), spread
(across passes) and the worst pass. Read by the report's burn-in section and by accept's
drift_pct / spread_pct rules."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from commbench.runfolder.reader import read_meta
from commbench.runfolder.schema import FAILING, NUMERIC, PASS_COLUMN, TEXT, TIME_COLUMNS

NODE = "node"


def pass_rows(run_dir: Path) -> pd.DataFrame:
    """Every row of every pass, with ``pass`` (rows of a pass cut short by a kill, not yet stamped,
    count as the pass after the last stamped one) and ``node``; an empty frame for a folder that is
    not a burn-in (no row has a pass)."""
    from commbench.runfolder.writer import RunFolder

    rows = RunFolder(Path(run_dir)).rows()
    if not any(PASS_COLUMN in r for r in rows):
        return pd.DataFrame()
    df = pd.DataFrame(rows)
    for col in NUMERIC:
        if col in df.columns:
            df[col] = pd.to_numeric(df[col], errors="coerce")
    for col in TEXT:
        if col in df.columns:
            df[col] = df[col].fillna("").astype(str)
    df[PASS_COLUMN] = df[PASS_COLUMN].fillna(df[PASS_COLUMN].max() + 1).astype(int)
    df[NODE] = node_of(df, read_meta(run_dir).get("hostname"))
    return df


def node_of(df: pd.DataFrame, hostname) -> pd.Series:
    """Each row's node: its ``host`` (per-node placement), its ``hosts`` (a pair, or several), else
    the host the run ran on."""
    default = str(hostname or "this host")
    node = pd.Series(default, index=df.index, dtype=object)
    for col in ("hosts", "host"):   # host wins where both are set
        if col in df.columns:
            have = df[col].notna() & df[col].astype(str).ne("")
            node[have] = df.loc[have, col].astype(str)
    return node




def failing_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of every pass that are not correct or not finished (results.csv shows only the last
    pass: a Case that failed in pass 3 and passed in pass 7 is found here)."""
    if df.empty or "status" not in df.columns:
        return df.iloc[0:0]
    wrong = pd.to_numeric(df["wrong"], errors="coerce").fillna(0) if "wrong" in df.columns else 0
    return df[df["status"].isin(FAILING) | (wrong > 0)]


def lower_is_better(metric: str) -> bool:
    return metric in TIME_COLUMNS or metric.endswith("_us")


@dataclass
class NodeTrend:
    node: str
    passes: int
    first: float
    last: float
    drift_pct: float        # first to last pass, signed so that positive is worse (a sag)
    spread_pct: float       # (max - min) / median of the per-pass values
    worst_pass: int
    worst: float


def per_pass(df: pd.DataFrame, metric: str, aggregate: str = "median") -> pd.DataFrame:
    """node x pass -> the aggregate of ``metric`` over the node's ok rows of that pass."""
    ok = df[df["status"].eq("ok")] if "status" in df.columns else df
    ok = ok[pd.to_numeric(ok[metric], errors="coerce").notna()] if metric in ok.columns else ok.iloc[0:0]
    if ok.empty:
        return pd.DataFrame()
    return ok.groupby([NODE, PASS_COLUMN])[metric].agg(aggregate).unstack(PASS_COLUMN).sort_index(axis=1)


def relative_time(df: pd.DataFrame) -> pd.DataFrame:
    """The rows with ``rel_time``: each ok row's time_us over the median of its Case (on its node)
    across passes, so points of every size weigh alike (1.0: the Case's usual time)."""
    if "time_us" not in df.columns or "status" not in df.columns:
        return df.iloc[0:0]
    ok = df[df["status"].eq("ok") & df["time_us"].notna() & df["time_us"].gt(0)].copy()
    if ok.empty:
        return ok
    ok["rel_time"] = ok["time_us"] / ok.groupby([NODE, "case_id"])["time_us"].transform("median")
    return ok


def trends(table: pd.DataFrame, metric: str) -> list[NodeTrend]:
    """One NodeTrend per node of a per_pass table (nodes measured in a single pass have no trend)."""
    worse = 1.0 if lower_is_better(metric) else -1.0
    out = []
    for node, values in table.iterrows():
        values = values.dropna()
        if len(values) < 2:
            continue
        first, last, median = float(values.iloc[0]), float(values.iloc[-1]), float(values.median())
        drift = worse * (last - first) / abs(first) * 100 if first else 0.0
        spread = (float(values.max()) - float(values.min())) / abs(median) * 100 if median else 0.0
        worst_pass = int(values.idxmax() if worse > 0 else values.idxmin())
        out.append(NodeTrend(str(node), len(values), first, last, drift, spread, worst_pass,
                             float(values[worst_pass])))
    return out


def trend_table(items: list[NodeTrend], unit: str = "") -> pd.DataFrame:
    return pd.DataFrame([{"node": t.node, "passes": t.passes, f"first pass{unit}": round(t.first, 4),
                          f"last pass{unit}": round(t.last, 4), "drift %": round(t.drift_pct, 2),
                          "spread %": round(t.spread_pct, 2), "worst pass": t.worst_pass,
                          f"worst{unit}": round(t.worst, 4)} for t in items])
