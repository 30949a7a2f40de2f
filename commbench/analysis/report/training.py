"""Training-step rows: a stacked bar per strategy (compute, copy, exposed communication, idle: the
step split from its timeline; step_bars.py draws it) and the table behind it. Reads only the
columns of docs/families/training.md."""
from __future__ import annotations

import pandas as pd

from ...measure.step_split import SHARE_COLUMNS
from . import step_bars

SHARES = tuple(SHARE_COLUMNS.values())

# besides the strategy, what may tell two bars of one op apart (shown only when it varies)
LABEL_COLUMNS = ("run", "bench", "model", "hidden", "ffn", "heads", "kv_heads", "tokens_per_rank", "seq_len",
                 "layers", "dtype", "reduce_dtype", "world_size", "backend")
# time_us: the timed steps; step_us and the split after it: the profiled batch (its own step)
TABLE_COLUMNS = ("run", "op", "strategy", "model", "tokens_per_rank", "dtype", "world_size", "time_us", "step_us",
                 "compute_us", "comm_us", "exposed_comm_us", "overlap_pct", "idle_us", "copy_us",
                 "compute_share_pct", "exposed_share_pct", "idle_share_pct",
                 "exposed_comm_sub_us", "slowest_rank", "comm_bytes_per_rank", "comm_busbw_gbps", "wrong")


def training_rows(df: pd.DataFrame) -> pd.DataFrame:
    """ok rows of the training family that carry a step time: the timed one (time_us) or, in older
    runs, the split's; a row without a timeline (timeline_note) has no split columns."""
    if df.empty or any(c not in df.columns for c in ("family", "status")) or not (
            {"step_us", "time_us"} & set(df.columns)):
        return df.iloc[0:0]
    rows = df[(df["family"].astype(str) == "training") & (df["status"].astype(str) == "ok")].copy()
    for col in (*step_bars.NUMERIC, "exposed_comm_sub_us", "time_us", *SHARES):
        if col in rows.columns:
            rows[col] = pd.to_numeric(rows[col], errors="coerce")
    return rows.dropna(subset=["time_us" if "time_us" in rows.columns else "step_us"])


def _labels(rows: pd.DataFrame) -> list[str]:
    if "strategy" not in rows.columns:
        rows = rows.assign(strategy=rows["op"])
    return step_bars.bar_labels(rows, ["strategy"], LABEL_COLUMNS)


def overlap_figure(df: pd.DataFrame):
    """One panel per op, one stacked bar per Case (the step: compute, exposed comm, idle); None
    without rows that carry the split."""
    rows = training_rows(df)
    rows = step_bars.split_rows(rows) if not rows.empty else rows
    if rows.empty:
        return None
    panels = []
    for op in sorted(rows["op"].astype(str).unique()):
        sub = rows[rows["op"].astype(str) == op]
        panels.append((op, _labels(sub), [r for _, r in sub.iterrows()]))
    return step_bars.panel_figure(panels, "time per step (us)")


def overlap_table(df: pd.DataFrame) -> pd.DataFrame:
    return step_bars.table(training_rows(df), TABLE_COLUMNS, ("run", "op", "strategy"))
