"""The MoE layer view (the report's section: sections/moe_layer.py): per model and phase, a stacked
bar per backend and overlap (compute, exposed communication, idle: the layer's step split from its
GPU timeline; step_bars.py draws it), and the table with dispatch / experts / combine and what
two-batch overlap hid."""
from __future__ import annotations

import pandas as pd

from . import step_bars

PANEL_KEYS = ("model", "phase", "dtype", "world_size")
# what else may tell two layers of one backend apart in a panel (runs overlaid, a routing or token
# sweep, events vs graph timing): a bar of its own, labelled, when it varies
BAR_KEYS = ("run", "routing", "timing", "tokens_per_rank", "tokens", "hidden", "experts", "topk",
            "intermediate", "num_sms", "gemm")
SHOWN = ("model", "phase", "backend", "dtype", "world_size", "overlap", "tokens_per_rank",
         "layer_us", "step_us", "dispatch_us", "expert_us", "combine_us", "comm_us", "exposed_comm_us",
         "overlap_pct", "idle_us", "compute_share_pct", "exposed_share_pct", "idle_share_pct",
         "tbo_hidden_us", "tbo_gain_pct", "serial_us", "overlap_gain",
         "tokens_per_s", "slowest_rank", "grouped_gemm", "max_token_err", "wrong")
NUMERIC = ("layer_us", "step_us", "dispatch_us", "expert_us", "combine_us", "comm_us", "exposed_comm_us",
           "overlap_pct", "idle_us", "compute_share_pct", "exposed_share_pct", "idle_share_pct",
           "tbo_hidden_us", "tbo_gain_pct", "serial_us", "overlap_gain", "tokens_per_s", "max_token_err")


def _is_layer(rows: pd.DataFrame):
    return rows["op"].astype(str) == "layer"


def layer_rows(df: pd.DataFrame) -> pd.DataFrame:
    """ok rows of the moe layer op that carry the layer columns (with or without a split)."""
    if df.empty or "op" not in df.columns or "layer_us" not in df.columns or "status" not in df.columns:
        return df.iloc[0:0]
    rows = df[_is_layer(df) & (df["status"].astype(str) == "ok")].copy()
    for col in NUMERIC:
        if col in rows.columns:
            rows[col] = pd.to_numeric(rows[col], errors="coerce")
    for col in ("model", "phase", "overlap"):
        if col not in rows.columns:
            rows[col] = ""
    return rows


def layer_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = layer_rows(df)
    if rows.empty:
        return rows
    return step_bars.table(rows, SHOWN, ("model", "phase", "dtype", "world_size", "backend", "overlap"))


def _panel_keys(rows: pd.DataFrame) -> list[str]:
    """model and phase always; dtype and world size when they vary."""
    keys = ["model", "phase"]
    keys += [k for k in PANEL_KEYS[2:] if k in rows.columns and rows[k].astype(str).nunique() > 1]
    return keys


def _bar_keys(panel: pd.DataFrame) -> list[str]:
    keys = [k for k in BAR_KEYS if k in panel.columns and panel[k].astype(str).nunique() > 1]
    return [k for k in keys if not (k == "tokens" and "tokens_per_rank" in keys)]


def _bars(panel: pd.DataFrame) -> tuple[list[str], list]:
    """(labels, rows) of one panel: a bar per backend and overlap (and per value of whatever else
    varies in the panel: run, routing, timing, ...), in that order."""
    keys = _bar_keys(panel)
    rows = panel.sort_values(["backend", "overlap", *keys], kind="stable")
    labels = step_bars.bar_labels(rows, ["backend", "overlap"], tuple(keys), bare=("run", "routing", "timing"))
    return labels, [r for _, r in rows.iterrows()]


def layer_figure(df: pd.DataFrame):
    """A panel per (model, phase[, dtype, world size]); None without split layer rows."""
    rows = layer_rows(df)
    rows = step_bars.split_rows(rows) if not rows.empty else rows
    if rows.empty:
        return None
    keys = _panel_keys(rows)
    panels = []
    for key, panel in rows.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        title = " ".join(f"{k}={v}" if k in ("dtype", "world_size") else str(v) for k, v in zip(keys, key))
        panels.append((title, *_bars(panel)))
    return step_bars.panel_figure(panels, "time per layer (us)")
