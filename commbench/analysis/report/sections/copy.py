"""The copy family's view: per GPU its host and device copies against their bounds, and the GPU
pair matrix (p2p, bidir) as a heatmap per op and engine, coloured by the share of the bound each
pair reached, so a slow pair or a slow GPU's row and column stand out (analysis/copy_matrix.py)."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from ....units import format_size
from ...bounds import with_bounds_runs
from ...copy_matrix import copy_rows, matrix, one_gpu_table, pair_groups
from ..plots import figure_png
from .base import ReportSection

PANEL_IN = 4.6   # inches per heatmap panel (8 GPUs: cells large enough for two lines of text)


def _rows(report) -> pd.DataFrame:
    """The copy rows with their bounds (each run by its own run.json)."""
    rows = with_bounds_runs(report.runs) if report.runs else report.rows
    return copy_rows(rows)


def applies(report) -> bool:
    return not copy_rows(report.rows).empty


def _title(what: dict, group: pd.DataFrame) -> str:
    size = format_size(int(group["size_bytes"].max()))
    run = f"{what['run']}: " if what.get("run") not in (None, "") else ""
    return f"{run}{what['op']} {what.get('engine', '')} {size}".strip()


def heatmap_figure(groups: list[tuple[dict, pd.DataFrame]]):
    """One panel per matrix: colour = pct_of_bound (0-100), each cell its GB/s and percent."""
    if not groups:
        return None
    ncols = min(2, len(groups))
    nrows = math.ceil(len(groups) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(PANEL_IN * ncols + 1, PANEL_IN * nrows), squeeze=False)
    image = None
    for ax, (what, group) in zip(axes.flat, groups):
        gbps = matrix(group, "busbw_gbps")
        pct = matrix(group, "pct_of_bound") if "pct_of_bound" in group.columns else gbps * math.nan
        image = ax.imshow(pct.to_numpy(dtype=float), vmin=0, vmax=100, cmap="RdYlGn")
        ax.set_xticks(range(len(gbps.columns)), [str(c) for c in gbps.columns])
        ax.set_yticks(range(len(gbps.index)), [str(i) for i in gbps.index])
        ax.set_xlabel("to GPU")
        ax.set_ylabel("from GPU")
        ax.set_title(_title(what, group), fontsize=9)
        for i in range(len(gbps.index)):
            for j in range(len(gbps.columns)):
                v, p = gbps.iat[i, j], pct.iat[i, j]
                if not pd.isna(v):
                    ax.text(j, i, f"{v:,.0f}" + ("" if pd.isna(p) else f"\n{p:.0f}%"), ha="center",
                            va="center", fontsize=7)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(image, ax=list(axes.flat), shrink=0.8, label="% of bound (cell text: busbw GB/s)")
    return fig


def _matrix_table(group: pd.DataFrame) -> pd.DataFrame:
    """The matrix as a table: cells 'GB/s (pct%)'."""
    gbps, pct = matrix(group, "busbw_gbps"), matrix(group, "pct_of_bound")
    cells = gbps.copy().astype(object)
    for i in gbps.index:
        for j in gbps.columns:
            v, p = gbps.loc[i, j], pct.loc[i, j] if not pct.empty else math.nan
            cells.loc[i, j] = "" if pd.isna(v) else f"{v:,.1f}" + ("" if pd.isna(p) else f" ({p:.0f}%)")
    cells.columns = [f"to {c}" for c in cells.columns]
    return cells.reset_index()


def add(doc, report) -> None:
    rows = _rows(report)
    sec = doc.section("Copies: host, device and GPU pairs")
    sec.text("The copy family's rows (docs/families/copy.md): busbw is bytes copied per second (both "
             "directions together for bidir), against the bound of the row's own GPU or GPU pair: PCIe for "
             "h2d and d2h, HBM / 2 for d2d, NVLink (else PCIe) for p2p, twice that for bidir "
             "(docs/metrics.md, \"Bounds\"). Each line and matrix shows its largest size.")
    sec.sub("Host and device copies, per GPU").table(one_gpu_table(rows), "no h2d, d2h or d2d rows")
    groups = pair_groups(rows)
    if not groups:
        sec.text("No GPU pair was measured (p2p and bidir need two GPUs).")
        return
    fig = heatmap_figure(groups)
    sec.image(figure_png(fig) if fig is not None else None, "GPU pair matrix", "copy_pairs.png")
    for what, group in groups:
        sec.sub(f"Pair matrix: {_title(what, group)} (busbw GB/s, % of bound)").table(_matrix_table(group))


SECTION = ReportSection("copy", 26, add, applies, family="copy")
