"""The compare report's figure: per op, the time ratio NEW/BASE against size, one line per curve
(backend, variant, ...), each point coloured by its verdict, with the curve's noise band (the ratios
within its noise floor: 1/(1 + floor) to 1 + floor) shaded behind it. Imported only when a compare
report is written (matplotlib)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from .compare_rule import CANT_TELL, PLAUSIBLE_EFFECT_PCT
from .report.plots import _size_axis, figure_png, plt

COLOURS = {"worse": "#c62828", "better": "#2e7d32", "unchanged": "#757575", CANT_TELL: "#ef6c00"}
MOST_CURVES = 10     # per panel; the rest (least changed first) are counted in the title
PANELS_PER_ROW = 3
CAP = 1.0 + PLAUSIBLE_EFFECT_PCT / 100.0   # the y axis and bands stop at a 10x change
CURVE_COLUMNS = ("backend", "variant", "dtype", "in_place", "timing", "world_size")
RATIO_TICKS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


def _curve_name(key: tuple, cols: list[str]) -> str:
    return " ".join(f"{c}={v}" if c in ("in_place", "world_size") else str(v) for c, v in zip(cols, key))


def _panel(ax, g: pd.DataFrame, cols: list[str]) -> int:
    """Draw one op's curves; return how many curves were left out."""
    curves = list(g.groupby(cols, sort=True, dropna=False)) if cols else [((), g)]
    size = lambda c: float(np.nanmax(np.abs(np.log(c["time_ratio"].astype(float)))))  # noqa: E731
    curves.sort(key=lambda kc: -size(kc[1]))
    for key, c in curves[:MOST_CURVES]:
        c = c.sort_values("size_bytes")
        x = c["size_bytes"].astype(float).to_numpy()
        y = np.clip(c["time_ratio"].astype(float).to_numpy(), 1 / CAP, CAP)
        floor = np.clip(1.0 + c["noise_pct"].astype(float).fillna(np.inf).to_numpy() / 100.0, 1.0, CAP)
        line, = ax.plot(x, y, lw=1, label=_curve_name(key if isinstance(key, tuple) else (key,), cols))
        ax.fill_between(x, 1 / floor, floor, color=line.get_color(), alpha=0.08, lw=0)
        for verdict, colour in COLOURS.items():
            sel = (c["verdict"] == verdict).to_numpy()
            if sel.any():
                ax.scatter(x[sel], y[sel], s=18, color=colour, zorder=3)
    ax.axhline(1.0, color="black", lw=0.6)
    _size_axis(ax, [int(x) for x in g["size_bytes"]])
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(FixedLocator(RATIO_TICKS))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}x"))
    ax.set_ylim(1 / CAP / 1.1, CAP * 1.1)
    return max(0, len(curves) - MOST_CURVES)


def ratio_figure_png(points: pd.DataFrame) -> bytes | None:
    """One PNG with a panel per op, or None when no point has a ratio."""
    pts = points[pd.to_numeric(points["time_ratio"], errors="coerce") > 0] if "time_ratio" in points else points
    if pts.empty or "size_bytes" not in pts:
        return None

    cols = [c for c in CURVE_COLUMNS if c in pts.columns and pts[c].astype(str).nunique() > 1] or \
        [c for c in ("backend",) if c in pts.columns]
    ops = sorted(pts["op"].astype(str).unique())
    rows = math.ceil(len(ops) / PANELS_PER_ROW)
    width = min(len(ops), PANELS_PER_ROW)
    fig, axes = plt.subplots(rows, width, figsize=(4.4 * width, 3.2 * rows), squeeze=False)
    for ax, op in zip(axes.flat, ops):
        left_out = _panel(ax, pts[pts["op"].astype(str) == op], cols)
        ax.set_title(op + (f" ({left_out} more curves not drawn)" if left_out else ""), fontsize=9)
        ax.set_xlabel("size (bytes)", fontsize=8)
        ax.set_ylabel("time NEW/BASE", fontsize=8)
        ax.legend(fontsize=6, loc="upper left")
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    handles = [plt.Line2D([], [], marker="o", ls="", color=c, label=v) for v, c in COLOURS.items()]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(f"time ratio against size; shaded: the noise band (changes within the floor), "
                 f"clipped at {CAP:g}x", fontsize=9)
    fig.tight_layout(rect=(0, 0.04, 1, 0.96))
    return figure_png(fig)
