"""Busbw and time vs size plots from results rows (matplotlib, Agg backend)."""
from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # never needs a display; safe on compute nodes and in CI
# Labels carry user text (run folder names, env values such as `a$_$b`): never read it as math.
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogFormatter, NullLocator  # noqa: E402

from commbench.units import format_size  # noqa: E402

from . import curve_band  # noqa: E402

# Columns that may tell two curves of one op apart; only those that vary get into labels. `hosts`:
# a placed run (per node, pairs) draws a curve per node or pair (a fleet: outliers and a band).
LINE_COLUMNS = ("run", "family", "bench", "backend", "variant", "dtype", "in_place",
                "world_size", "timing", "hosts")
# Always part of a label so a reader can tell what a line is, even when constant.
BASE_LABEL = ("backend", "variant")

METRICS = {
    "busbw_gbps": ("busbw (GB/s)", "busbw_vs_size.png"),
    "time_us": ("time (us)", "time_vs_size.png"),
}


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows worth plotting: status ok and a size."""
    if df.empty or "status" not in df.columns:
        return df.iloc[0:0]
    out = df[df["status"].astype(str) == "ok"]
    return out[pd.to_numeric(out["size_bytes"], errors="coerce").notna()]


def line_columns(df: pd.DataFrame, params=()) -> list[str]:
    """The columns that define one line: (backend, variant) plus whatever else varies, among
    LINE_COLUMNS and the runs' parameter columns ``params`` (e.g. the proxy's executor: a sweep
    over one splits the lines; reader.param_columns names them from run.json)."""
    cols = [c for c in BASE_LABEL if c in df.columns]
    for c in (*LINE_COLUMNS, *params):
        if c in df.columns and c not in cols and df[c].astype(str).nunique() > 1:
            cols.append(c)
    return cols


def _label(key, cols: list[str]) -> str:
    key = key if isinstance(key, tuple) else (key,)
    parts = []
    for c, v in zip(cols, key):
        if c in ("backend", "variant", "run", "bench", "hosts"):
            parts.append(str(v))
        else:
            parts.append(f"{c}={v}")
    return " ".join(parts)


def _size_axis(ax, sizes: list[int]) -> None:
    """Log2 x axis with ticks at powers of two, labelled 8B, 1KiB, 1MiB."""
    ax.set_xscale("log", base=2)
    lo = max(1, int(min(sizes)))
    hi = max(lo, int(max(sizes)))
    lo_exp, hi_exp = int(math.floor(math.log2(lo))), int(math.ceil(math.log2(hi)))
    step = max(1, math.ceil((hi_exp - lo_exp + 1) / 8))  # at most ~8 labels, readable
    ticks = [2**e for e in range(lo_exp, hi_exp + 1, step)]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: format_size(int(round(x)))))
    ax.tick_params(axis="x", labelrotation=45)


def _log_value_axis(ax) -> None:
    """Log y axis labelled in plain numbers (10, 100, 1e+05). Math text is off for user labels,
    so matplotlib's default log labels ($\\mathdefault{10^{1}}$) would show as typed."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter(base=10))
    ax.yaxis.set_minor_formatter(LogFormatter(base=10, labelOnlyBase=False))


LEGEND_INSIDE_MAX = 4   # more lines than this: one legend for the figure, right of the panels


def plot_title(df: pd.DataFrame, metas: list[dict] | None = None) -> str:
    """What a plot shows and where it came from: suite(s), ranks, hosts, date(s)."""
    def joined(values, most: int = 3) -> str:
        vals = [str(v) for v in dict.fromkeys(values) if str(v) not in ("", "nan", "None")]
        return ", ".join(vals[:most]) + (f" +{len(vals) - most}" if len(vals) > most else "")

    parts = []
    if "suite" in df.columns:
        parts.append(joined(df["suite"]))
    if "world_size" in df.columns:
        sizes = sorted({int(v) for v in pd.to_numeric(df["world_size"], errors="coerce").dropna()})
        if sizes:
            parts.append(f"{joined(sizes)} rank{'s' if sizes != [1] else ''}")
    metas = [m for m in metas or [] if m]
    hosts = [h for m in metas for h in (m.get("hosts") or [])]
    if hosts:
        parts.append(joined(hosts))
    dates = [str(m.get("started_utc", ""))[:16].replace("T", " ") for m in metas if m.get("started_utc")]
    if dates:
        parts.append(joined(dates, most=2) + " UTC")
    return " | ".join(p for p in parts if p)


def _colors(labels: list[str]) -> dict[str, object]:
    """One color per line label, the same in every panel (a figure legend must match them all)."""
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    return {lab: cmap(i % cmap.N) for i, lab in enumerate(labels)}


def curve_table(sub: pd.DataFrame, metric: str, cols: list[str]) -> pd.DataFrame:
    """One row per curve (indexed by its label), one column per size: the curve's median there
    (several rows per size: a parameter sweep not in the label)."""
    if not cols:
        table = sub.groupby("size_bytes")[metric].median().to_frame().T
        table.index = [_label((), cols)]
        return table
    table = sub.groupby([*cols, "size_bytes"], sort=True, dropna=False)[metric].median().unstack("size_bytes")
    table.index = [_label(k, cols) for k in table.index]
    return table.sort_index(axis=1)


@dataclass
class Panel:
    """One op's panel: its rows, its curves (curve_table) and, when they are more than a reader
    can follow (curve_band.MAX_CURVES), each curve's score against the others."""

    op: str
    rows: pd.DataFrame
    table: pd.DataFrame
    scores: pd.DataFrame | None = None   # curve_band.curve_scores, banded panels only

    @property
    def banded(self) -> bool:
        return self.scores is not None


def figure_panels(df: pd.DataFrame, metric: str, params=()) -> list[Panel]:
    """The panels of ``metric_figure``: a panel per op of the ok rows, each with its curves."""
    rows = ok_rows(df)
    if rows.empty or metric not in rows.columns:
        return []
    rows = rows.copy()
    rows[metric] = pd.to_numeric(rows[metric], errors="coerce")
    rows["size_bytes"] = pd.to_numeric(rows["size_bytes"]).astype("int64")
    cols = line_columns(rows, params)   # one labelling for the figure: a line is named alike in every panel
    panels = []
    for op, sub in rows.groupby(rows["op"].astype(str), sort=True):
        table = curve_table(sub, metric, cols)
        facets = _facets(sub, cols) if len(table) > curve_band.MAX_CURVES else []
        if not facets:
            facets = [("", sub)]
        for title, part in facets:
            table = curve_table(part, metric, cols) if title else table
            scores = curve_band.curve_scores(table) if len(table) > curve_band.MAX_CURVES else None
            panels.append(Panel(f"{op} {title}".strip(), part, table, scores))
    return panels


def _facets(sub: pd.DataFrame, cols: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """A panel of too many curves that differ in more than one way (1,000 nodes x 2 backends): a
    panel per value of the other columns (one per backend), so the band and its outliers compare
    like with like; [] when only one column tells the curves apart."""
    varying = [c for c in cols if sub[c].astype(str).nunique() > 1]
    if len(varying) < 2:
        return []
    many = max(varying, key=lambda c: sub[c].astype(str).nunique())
    by = [c for c in varying if c != many]
    return [(_label(key, by), part) for key, part in sub.groupby(by, sort=True, dropna=False)]


def curve_outliers(panels: list[Panel]) -> pd.DataFrame:
    """The outlier curves of every banded panel (figure_panels): op, curve, curves (in the panel),
    median_ratio, robust_z, drawn (whether the figure draws it: at most curve_band.MAX_LABELLED
    per panel)."""
    recs = []
    for p in panels:
        if not p.banded:
            continue
        flagged = curve_band.outliers(p.scores)
        for i, (curve, row) in enumerate(flagged.iterrows()):
            recs.append({"op": p.op, "curve": curve, "curves": len(p.table),
                         "median_ratio": round(float(row["median_ratio"]), 3),
                         "robust_z": round(float(row["robust_z"]), 1), "drawn": i < curve_band.MAX_LABELLED})
    return pd.DataFrame(recs, columns=["op", "curve", "curves", "median_ratio", "robust_z", "drawn"])


def _panel_lines(table: pd.DataFrame) -> list[tuple[str, pd.Series]]:
    lines = []
    for lab, pts in table.iterrows():
        pts = pts[pts > 0]   # log axis: busbw is 0 on one rank, as in nccl-tests (NaN fails too)
        if not pts.empty:
            lines.append((lab, pts))
    return lines


def metric_figure(df: pd.DataFrame, metric: str, title: str = "", params=(), bounds=None,
                  panels: list[Panel] | None = None):
    """One figure: a panel per op, a line per distinct line key (``params``: line_columns).
    ``bounds`` (optional): op -> [(GB/s, label)], drawn as dashed horizontal lines (the ceiling
    of the links, analysis/bounds.py). Returns a Figure or None.

    A panel with more than curve_band.MAX_CURVES curves draws its outliers and a band for the
    rest (curve_band.py). Up to LEGEND_INSIDE_MAX legend entries a panel carries its own legend;
    with more, one legend for the whole figure sits right of the panels, so it never covers a curve.
    ``panels``: figure_panels(df, metric, params) when the caller has them already."""
    panels = figure_panels(df, metric, params) if panels is None else panels
    if not panels:
        return None
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.9 * nrows), squeeze=False)
    ylabel = METRICS.get(metric, (metric, ""))[0]
    drawn = [list(curve_band.outliers(p.scores).index[:curve_band.MAX_LABELLED]) if p.banded
             else [lab for lab, _ in _panel_lines(p.table)] for p in panels]
    labels = list(dict.fromkeys(lab for labs in drawn for lab in labs))
    colors = _colors(labels)
    entries = len(labels) + (len(curve_band.BAND_STYLE) if any(p.banded for p in panels) else 0)
    outside = entries > LEGEND_INSIDE_MAX
    handles = {}
    for ax, p in zip(axes.flat, panels):
        if p.banded:
            here = curve_band.draw_band(ax, p.table, p.scores, colors, {lab: lab for lab in p.table.index})
            n_out = len(curve_band.outliers(p.scores))
            ax.set_title(f"{p.op}: {len(p.table)} curves, {n_out} outlier{'s' if n_out != 1 else ''}")
        else:
            here = {}
            for lab, pts in _panel_lines(p.table):
                here[lab], = ax.plot(pts.index, pts.values, marker="o", markersize=3, label=lab, color=colors[lab])
            ax.set_title(p.op)
        handles.update(here)
        _panel_axes(ax, p, here, ylabel, metric, (bounds or {}).get(p.op, ()), legend=not outside)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if outside:
        band_first = [t for _c, t in curve_band.BAND_STYLE.values() if t in handles]
        order = band_first + [lab for lab in labels if lab in handles]
        fig.legend([handles[lab] for lab in order], order,
                   loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    return fig


def _panel_axes(ax, p: Panel, handles: dict, ylabel: str, metric: str, bounds, legend: bool) -> None:
    for gbps, text in bounds:
        ax.axhline(gbps, linestyle="--", linewidth=1, color="0.35")
        ax.annotate(text, (0.01, gbps), xycoords=("axes fraction", "data"), fontsize=7, color="0.25",
                    va="bottom")
    _size_axis(ax, list(p.rows["size_bytes"]))
    ax.set_xlabel("size")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    if handles:
        _log_value_axis(ax)
        if legend:
            ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, f"no positive {metric}", ha="center", va="center", transform=ax.transAxes)


def figure_png(fig) -> bytes:
    """Render a figure to PNG bytes (legends outside the panels included) and free it."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def write_run_plots(df: pd.DataFrame, out_dir: Path, meta: dict | None = None) -> list[Path]:
    """Write busbw-vs-size and time-vs-size PNGs for the ok rows of a run; return the paths.
    ``meta`` (run.json) gives the title its hosts and date, and the lines their parameter columns."""
    from commbench.runfolder.reader import param_columns

    out_dir = Path(out_dir)
    written: list[Path] = []
    title = plot_title(df, [meta] if meta else [])
    params = param_columns(meta or {}, df.columns)
    for metric, (_label_txt, filename) in METRICS.items():
        fig = metric_figure(df, metric, title, params)
        if fig is None:
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / filename
        path.write_bytes(figure_png(fig))
        written.append(path)
    from .training import overlap_figure

    fig = overlap_figure(df)
    if fig is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "training_overlap.png"
        path.write_bytes(figure_png(fig))
        written.append(path)
    return written
