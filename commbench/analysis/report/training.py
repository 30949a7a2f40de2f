"""Training-step rows: a stacked bar per strategy (compute / exposed / hidden communication)
and the table behind it. Reads only the columns of docs/families/training.md."""
from __future__ import annotations

import math
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

NEEDED = ("step_us", "compute_us", "comm_us", "exposed_comm_us")
# besides the strategy, what may tell two bars of one op apart (shown only when it varies)
LABEL_COLUMNS = ("run", "bench", "model", "hidden", "ffn", "heads", "kv_heads", "tokens_per_rank", "seq_len",
                 "layers", "dtype", "reduce_dtype", "world_size", "backend")
LABEL_WIDTH_CHARS = 16   # a bar label's lines wrap here, so a bar needs little width
MAX_WIDTH_IN = 60.0      # beyond this a figure is not looked at whole anyway
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
    fig, axes = plt.subplots(nrows, ncols, figsize=(min(MAX_WIDTH_IN, max(6.5, 0.6 * most + 2) * ncols), 5.2 * nrows),
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
        ax.set_xticklabels([_wrapped(lab) for lab in _labels(sub)], fontsize=7, rotation=0, ha="center")
        ax.set_ylabel("time per step (us)")
        ax.set_title(op)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(ops):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _fit_tick_labels(fig)
    return fig


def _wrapped(label: str, width: int = LABEL_WIDTH_CHARS) -> str:
    """Each line of a bar label wrapped at ``width`` characters (at spaces and '+')."""
    out = []
    for line in label.split("\n"):
        out += textwrap.wrap(line.replace("+", "+ "), width, break_long_words=False) or [""]
    return "\n".join(w.replace("+ ", "+") for w in out)


def _fit_tick_labels(fig, gap: float = 1.15, rounds: int = 4) -> None:
    """Widen the figure until every panel's bar labels fit side by side (measured from the drawn
    text, not guessed from character counts): labels that overlap cannot be read."""
    for _ in range(rounds):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        need = 1.0
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            boxes = sorted((t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()),
                           key=lambda b: b.x0)
            for a, b in zip(boxes, boxes[1:]):   # neighbours: their centres move apart as the axis widens
                apart = (b.x0 + b.x1 - a.x0 - a.x1) / 2
                if apart > 0:
                    need = max(need, gap * (a.width + b.width) / 2 / apart)
        if need <= 1.0:
            return
        if fig.get_figwidth() >= MAX_WIDTH_IN:   # as wide as is useful: one line each, stood up
            for ax in fig.axes:
                texts = [" ".join(t.get_text().split()) for t in ax.get_xticklabels()]
                ax.set_xticks(ax.get_xticks())
                ax.set_xticklabels(texts, fontsize=6, rotation=90, ha="center")
            fig.tight_layout()
            return
        fig.set_size_inches(min(MAX_WIDTH_IN, fig.get_figwidth() * need), fig.get_figheight())
        fig.tight_layout()


def overlap_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = training_rows(df)
    cols = [c for c in TABLE_COLUMNS if c in rows.columns]
    return rows[cols].sort_values([c for c in ("run", "op", "strategy") if c in cols]).reset_index(drop=True)
