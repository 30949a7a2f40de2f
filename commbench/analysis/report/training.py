"""Training-step rows: a stacked bar per strategy (compute / exposed / hidden communication)
and the table behind it. Reads only the columns of docs/families/training.md."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

NEEDED = ("step_us", "compute_us", "comm_us", "exposed_comm_us")
# besides the strategy, what may tell two bars of one op apart (shown only when it varies)
LABEL_COLUMNS = ("run", "bench", "model", "hidden", "ffn", "heads", "kv_heads", "tokens_per_rank", "seq_len",
                 "layers", "dtype", "reduce_dtype", "world_size", "backend")
TABLE_COLUMNS = ("run", "op", "strategy", "model", "tokens_per_rank", "dtype", "world_size", "step_us",
                 "compute_us", "comm_us", "exposed_comm_us", "overlap_pct", "comm_bytes_per_rank",
                 "comm_busbw_gbps", "wrong")


def training_rows(df: pd.DataFrame) -> pd.DataFrame:
    """ok rows of the training family that carry the step columns."""
    if df.empty or "family" not in df.columns or any(c not in df.columns for c in NEEDED):
        return df.iloc[0:0]
    rows = df[(df["family"].astype(str) == "training") & (df["status"].astype(str) == "ok")].copy()
    for col in NEEDED:
        rows[col] = pd.to_numeric(rows[col], errors="coerce")
    return rows.dropna(subset=list(NEEDED))


def _labels(rows: pd.DataFrame) -> list[str]:
    varying = [c for c in LABEL_COLUMNS if c in rows.columns and rows[c].astype(str).nunique() > 1]
    out = []
    for _, r in rows.iterrows():
        parts = [str(r.get("strategy", r.get("op")))]
        parts += [str(r[c]) if c in ("run", "bench", "model", "dtype") else f"{c}={r[c]}" for c in varying]
        out.append("\n".join(parts))
    return out


def overlap_figure(df: pd.DataFrame, title: str = ""):
    """One panel per op, one bar per Case: compute, exposed and hidden communication (us).

    compute + exposed is the step; the hidden part ran under compute (comm - exposed)."""
    rows = training_rows(df)
    if rows.empty:
        return None
    ops = sorted(rows["op"].astype(str).unique())
    ncols = min(2, len(ops))
    nrows = math.ceil(len(ops) / ncols)
    most = int(rows["op"].astype(str).value_counts().max())    # bars in the fullest panel
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(6.5, 0.6 * most + 2) * ncols, 5.2 * nrows),
                             squeeze=False)
    for ax, op in zip(axes.flat, ops):
        sub = rows[rows["op"].astype(str) == op]
        x = list(range(len(sub)))
        compute = sub["compute_us"].to_numpy()
        exposed = sub["exposed_comm_us"].clip(lower=0).to_numpy()
        hidden = (sub["comm_us"] - sub["exposed_comm_us"]).clip(lower=0).to_numpy()
        ax.bar(x, compute, label="compute", color="#4c72b0")
        ax.bar(x, exposed, bottom=compute, label="exposed communication", color="#dd5555")
        ax.bar(x, hidden, bottom=compute + exposed, label="hidden communication", color="#f2b6b6",
               hatch="//", edgecolor="#dd5555", linewidth=0)
        ax.set_xticks(x)
        ax.set_xticklabels(_labels(sub), fontsize=7, rotation=30, ha="right")
        ax.set_ylabel("time per step (us)")
        ax.set_title(op)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(ops):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def overlap_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = training_rows(df)
    cols = [c for c in TABLE_COLUMNS if c in rows.columns]
    return rows[cols].sort_values([c for c in ("run", "op", "strategy") if c in cols]).reset_index(drop=True)
