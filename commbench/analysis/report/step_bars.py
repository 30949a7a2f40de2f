"""Where a step's time goes, drawn: one stacked bar per step split (compute, copy, exposed
communication, idle: together the step), shared by the training and MoE-layer views and the per-rank
step timelines. Reads the split's columns (docs/metrics.md, "Step split"); rows without them (runs
made before the split was measured from the timeline) get no bar.

compute_us holds the copies (a local copy is work the step needs), so the bar splits it into the
time with compute kernels but no copy and the copy time; the communication that ran under that work
(comm - exposed) is hatched in red over its top, so red and hatched together are all the
communication.
"""
from __future__ import annotations

import math
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

SPLIT = ("step_us", "compute_us", "exposed_comm_us", "idle_us")
NUMERIC = (*SPLIT, "comm_us", "copy_us", "overlap_pct")
# (label, color, hatch) of the stacked parts, bottom first
PARTS = (("compute", "#4c72b0", ""), ("copy", "#8da0cb", "//"), ("exposed communication", "#dd5555", ""),
         ("idle", "#d9d9d9", ""))
LABEL_WIDTH_CHARS = 16   # a bar label's lines wrap here, so a bar needs little width
MAX_WIDTH_IN = 60.0      # beyond this a figure is not looked at whole anyway


def split_rows(df: pd.DataFrame, keep=None) -> pd.DataFrame:
    """ok rows (those ``keep(df)`` selects) that carry a step split, its columns numeric."""
    if df.empty or "status" not in df.columns or any(c not in df.columns for c in SPLIT):
        return df.iloc[0:0]
    rows = df[df["status"].astype(str) == "ok"]
    if keep is not None:
        rows = rows[keep(rows)]
    rows = rows.copy()
    for col in NUMERIC:
        if col in rows.columns:
            rows[col] = pd.to_numeric(rows[col], errors="coerce")
    return rows.dropna(subset=list(SPLIT))


def parts(split) -> list[float]:
    """The stacked heights of one split (a dict or a row): compute without copy, copy, exposed
    communication, idle."""
    copy = min(_num(split.get("copy_us")), _num(split.get("compute_us")))
    return [max(0.0, _num(split.get("compute_us")) - copy), copy, max(0.0, _num(split.get("exposed_comm_us"))),
            max(0.0, _num(split.get("idle_us")))]


def draw_bars(ax, xs: list[float], splits: list, width: float = 0.8, legend: bool = True) -> None:
    """Stacked bars at ``xs`` (one per split), the copy part only when some split has one; the
    communication that compute hid (comm - exposed) is hatched over the top of the compute part,
    so hatched and red together are all the communication, and the bar stays the step."""
    heights = [parts(s) for s in splits]
    bottom = [0.0] * len(xs)
    for i, (label, color, hatch) in enumerate(PARTS):
        vals = [h[i] for h in heights]
        if label == "copy" and not any(vals):
            continue
        ax.bar(xs, vals, width, bottom=bottom, color=color, hatch=hatch, label=label if legend else None,
               edgecolor="white" if hatch else None, linewidth=0)
        bottom = [b + v for b, v in zip(bottom, vals)]
    hidden = [min(h[0] + h[1], max(0.0, _num(s.get("comm_us")) - h[2])) for s, h in zip(splits, heights)]
    if any(hidden):
        ax.bar(xs, hidden, width, bottom=[h[0] + h[1] - v for h, v in zip(heights, hidden)], fill=False,
               hatch="//", edgecolor="#dd5555", linewidth=0,
               label="communication hidden under compute" if legend else None)


def _num(v) -> float:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(v) else v


def panel_figure(panels: list[tuple[str, list[str], list]], ylabel: str):
    """One panel per (title, bar labels, splits); two panels a row."""
    ncols = min(2, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    most = max(len(labels) for _, labels, _ in panels)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False,
                             figsize=(min(MAX_WIDTH_IN, max(6.5, 0.6 * most + 2) * ncols), 5.2 * nrows))
    for ax, (title, labels, splits) in zip(axes.flat, panels):
        xs = list(range(len(splits)))
        draw_bars(ax, xs, splits)
        ax.set_xticks(xs)
        ax.set_xticklabels([wrapped(lab) for lab in labels], fontsize=7, rotation=0, ha="center")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    fit_tick_labels(fig)
    return fig


def bar_labels(rows: pd.DataFrame, first: list[str], columns: tuple[str, ...],
               bare=("run", "bench", "model", "dtype")) -> list[str]:
    """A label per row: the ``first`` columns' values, then each of ``columns`` that varies."""
    varying = [c for c in columns if c in rows.columns and c not in first and rows[c].astype(str).nunique() > 1]
    out = []
    for _, r in rows.iterrows():
        head = [str(r[c]) for c in first if c in rows.columns]
        out.append("\n".join([" ".join(head), *(str(r[c]) if c in bare else f"{c}={r[c]}" for c in varying)]))
    return out


def wrapped(label: str, width: int = LABEL_WIDTH_CHARS) -> str:
    """Each line of a bar label wrapped at ``width`` characters (at spaces and '+')."""
    out = []
    for line in label.split("\n"):
        out += textwrap.wrap(line.replace("+", "+ "), width, break_long_words=False) or [""]
    return "\n".join(w.replace("+ ", "+") for w in out)


def fit_tick_labels(fig, gap: float = 1.15, rounds: int = 4) -> None:
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


def table(rows: pd.DataFrame, columns: tuple[str, ...], order: tuple[str, ...]) -> pd.DataFrame:
    """The rows' ``columns`` (those present), sorted by ``order``, numbers rounded."""
    cols = [c for c in columns if c in rows.columns]
    out = rows.sort_values([c for c in order if c in rows.columns])[cols].copy()
    for col in out.columns:
        if pd.api.types.is_float_dtype(out[col]):
            out[col] = out[col].round(3)
    return out.reset_index(drop=True)

