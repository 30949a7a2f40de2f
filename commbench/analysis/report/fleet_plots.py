"""The fleet section's figures (fleet.py's data): per-size distributions across the units with the
outliers labelled, and pair heatmaps of node x node relative speed that stay readable at 1,024
nodes (a full matrix with names up to FULL_LABELLED nodes; beyond, the whole matrix pooled into
blocks, each block its worst pair, beside the worst nodes against their partners, named)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm

from ...units import format_size
from . import curve_band
from .fleet import FleetPanel, drawn_curves, worst_nodes
from .plots import _log_value_axis, plt

FULL_LABELLED = 48     # nodes: a full matrix with every name readable
MAX_BLOCKS = 128       # the pooled overview's side, in blocks
WORST_NODES = 32       # rows of the worst-nodes heatmap
MAX_PARTNERS = 48      # its columns: each node's worst partners
MAX_PANELS = 6         # distribution panels per figure
NORM = dict(vmin=0.5, vcenter=1.0, vmax=1.25)
CMAP = "RdYlGn"


def distribution_figure(panels: list[FleetPanel], flags: dict[str, str]):
    """Per panel, a box per message size over the units (whiskers p1-p99, no flier dots) and the
    outliers drawn over it, named with their speed and robust z."""
    shown = panels[:MAX_PANELS]
    fig, axes = plt.subplots(len(shown), 1, figsize=(9, 3.3 * len(shown)), squeeze=False)
    for ax, p in zip(axes[:, 0], shown):
        sizes = list(p.table.columns)
        x = np.log2(np.asarray(sizes, dtype=float))
        data = [p.table[s].dropna().to_numpy() for s in sizes]
        keep = [i for i, d in enumerate(data) if len(d)]
        ax.boxplot([data[i] for i in keep], positions=x[keep], widths=0.6, whis=(1, 99), showfliers=False,
                   patch_artist=True, boxprops=dict(facecolor="0.85", edgecolor="0.4"),
                   medianprops=dict(color="0.1"), whiskerprops=dict(color="0.5"), capprops=dict(color="0.5"))
        drawn = drawn_curves(p, flags)
        colors = plt.get_cmap("tab10")
        for i, (label, pts) in enumerate(drawn):
            pts = pts.dropna()
            ax.plot(np.log2(pts.index.to_numpy(dtype=float)), pts.values, marker="o", ms=3, lw=1.2,
                    color=colors(i % 10), label=label)
        _log_value_axis(ax)
        step = max(1, len(sizes) // 10)
        ax.set_xticks(x[::step])
        ax.set_xticklabels([format_size(int(s)) for s in sizes[::step]], fontsize=7)
        n_out = len(curve_band.outliers(p.scores))
        ax.set_title(f"{p.label}: {p.metric} across {len(p.table)} {p.unit}s per size "
                     f"(box p25-p75, whiskers p1-p99); {n_out} outlier {p.unit}(s)", fontsize=8)
        ax.set_ylabel(p.metric, fontsize=8)
        ax.grid(True, alpha=0.3)
        if drawn:
            ax.legend(fontsize=6, loc="best")
    axes[-1, 0].set_xlabel("message size")
    fig.tight_layout()
    return fig


def pair_heatmap(p: FleetPanel, matrix: pd.DataFrame, nodes: pd.DataFrame, flags: dict[str, str]):
    """node x node relative speed: the full matrix, named, up to FULL_LABELLED nodes; else the pooled
    overview and the worst nodes against their partners."""
    if len(matrix) <= FULL_LABELLED:
        fig, ax = plt.subplots(figsize=(7.5, 6.5))
        im = ax.imshow(matrix.to_numpy(), cmap=CMAP, norm=TwoSlopeNorm(**NORM), interpolation="nearest")
        names = [_name(n, flags) for n in matrix.index]
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=90, fontsize=6)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names, fontsize=6)
        ax.set_title(f"{p.label}: pair speed vs the others (1.0 typical; blank: not measured)", fontsize=8)
        fig.colorbar(im, ax=ax, shrink=0.8, label="relative speed")
        fig.tight_layout()
        return fig
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 7.5), gridspec_kw={"width_ratios": [1, 1.15]},
                                      layout="constrained")
    _overview(left, matrix)
    im = _worst(right, matrix, nodes, flags, worst_nodes(p, nodes, flags, WORST_NODES))
    fig.colorbar(im, ax=[left, right], shrink=0.8, label="relative speed (1.0 typical)")
    fig.suptitle(f"{p.label}: {len(matrix)} nodes, {int(np.isfinite(matrix.to_numpy()).sum() // 2)} pairs measured",
                 fontsize=9)
    return fig


def pooled(matrix: pd.DataFrame, blocks: int = MAX_BLOCKS) -> tuple[np.ndarray, list[int]]:
    """The matrix pooled into at most ``blocks`` x ``blocks`` cells, each the worst (lowest) speed of
    its pairs (NaN: none measured), and each block's first node index."""
    m = matrix.to_numpy()
    n = len(m)
    edges = np.linspace(0, n, min(blocks, n) + 1).astype(int)
    starts = edges[:-1]
    with np.errstate(all="ignore"):
        filled = np.where(np.isfinite(m), m, np.inf)
        rows = np.minimum.reduceat(filled, starts, axis=0)
        cells = np.minimum.reduceat(rows, starts, axis=1)
    cells[np.isinf(cells)] = np.nan
    return cells, list(starts)


def _overview(ax, matrix: pd.DataFrame) -> None:
    cells, starts = pooled(matrix)
    per = max(1, len(matrix) // len(starts))
    ax.imshow(cells, cmap=CMAP, norm=TwoSlopeNorm(**NORM), interpolation="nearest")
    ticks = list(range(0, len(starts), max(1, len(starts) // 16)))
    names = [str(matrix.index[starts[t]]) for t in ticks]
    ax.set_xticks(ticks)
    ax.set_xticklabels(names, rotation=90, fontsize=6)
    ax.set_yticks(ticks)
    ax.set_yticklabels(names, fontsize=6)
    ax.set_title(f"all nodes by name, {per} per block (a block: its worst pair)\n"
                 "a red row and column: a bad node; a red cell alone: a bad link", fontsize=8)


def _worst(ax, matrix: pd.DataFrame, nodes: pd.DataFrame, flags: dict[str, str], worst: list[str]):
    rows = []
    for n in worst:
        partners = matrix.loc[n].dropna().sort_values()
        rows.append(partners.to_numpy()[:MAX_PARTNERS])
    width = max((len(r) for r in rows), default=1)
    grid = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        grid[i, :len(r)] = r
    im = ax.imshow(grid, cmap=CMAP, norm=TwoSlopeNorm(**NORM), interpolation="nearest", aspect="auto")
    labels = [f"{_name(n, flags)} (x{nodes.loc[n, 'speed']:.2f}, z {nodes.loc[n, 'robust_z']:.1f})" for n in worst]
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=6)
    ax.set_xlabel(f"its partners, slowest first (up to {MAX_PARTNERS}); every partner slow: the node, one: a link",
                  fontsize=7)
    ax.set_title(f"{len(worst)} nodes against their partners: those that stand out or fail health, the ends "
                 "of slow pairs,\nthen the slowest by the median of their pairs", fontsize=8)
    return im


def _name(node: str, flags: dict[str, str]) -> str:
    return f"{node} [health]" if node in flags else str(node)
