"""Bounds: each row's busbw against the ceiling of the links it crossed (analysis/bounds.py):
findings per op, a table, busbw plots with the bound as a dashed line, the node's links, and
why rows have no bound."""
from __future__ import annotations

import pandas as pd

from ....units import format_size
from ...bound_limits import link_name
from ...bounds import with_bounds_runs
from ..plots import figure_png, metric_figure, ok_rows, plot_title
from .base import ReportSection

LINE_KEY = ("op", "backend", "variant", "world_size", "bound_link")
ABOVE_PCT = 105.0   # a busbw this far above its bound means a wrong bound, not a fast link


def applies(report) -> bool:
    """Runs that recorded their links (run.json ``links``, written since bounds exist)."""
    return any("links" in (r.meta or {}) for r in report.runs)


def findings(rows: pd.DataFrame) -> list[str]:
    """One line per (op, backend, variant, ranks, link): the share of the bound reached at the
    largest size, e.g. 'all_gather nccl, 8 rank(s), reaches 91% of NVLink 4 (18 links) at 1GiB (bound 450 GB/s)'."""
    ok = ok_rows(rows)
    ok = ok[pd.to_numeric(ok["pct_of_bound"], errors="coerce") > 0]
    lines = []
    key = [c for c in LINE_KEY if c in ok.columns]
    for values, group in ok.groupby(key, sort=True, dropna=False) if not ok.empty else ():
        top = group.loc[pd.to_numeric(group["size_bytes"]).idxmax()]
        who = dict(zip(key, values))
        variant = f" {who['variant']}" if str(who.get("variant", "")) not in ("", "nan", "default") else ""
        lines.append(f"{who['op']} {who.get('backend', '')}{variant}, {int(who.get('world_size', 1))} rank(s), "
                     f"reaches {top['pct_of_bound']:.0f}% of {link_name(str(who['bound_link']))} at "
                     f"{format_size(int(top['size_bytes']))} (bound {top['bound_gbps']:,.0f} GB/s)")
    above = ok[pd.to_numeric(ok["pct_of_bound"], errors="coerce") > ABOVE_PCT]
    for _, r in above.iterrows():
        lines.append(f"ABOVE ITS BOUND: {r['op']} {r.get('backend', '')} at {format_size(int(r['size_bytes']))}: "
                     f"busbw {r['busbw_gbps']:.1f} GB/s is {r['pct_of_bound']:.0f}% of {r['bound_link']}: "
                     "the machine's links were misread or the op moved less than busbw assumes")
    return lines


def table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per line: the bound, the best busbw and the share of the bound it reached."""
    ok = ok_rows(rows)
    ok = ok[pd.to_numeric(ok["bound_gbps"], errors="coerce") > 0]
    if ok.empty:
        return pd.DataFrame()
    key = [c for c in ("run", *LINE_KEY) if c in ok.columns]
    best = ok.loc[ok.groupby(key, dropna=False)["pct_of_bound"].idxmax().dropna()]
    out = best[key + ["bound_gbps", "busbw_gbps", "pct_of_bound", "size_bytes"]].copy()
    out["size_bytes"] = [format_size(int(s)) for s in out["size_bytes"]]
    return out.rename(columns={"busbw_gbps": "best busbw_gbps", "pct_of_bound": "best pct_of_bound",
                               "size_bytes": "at size"})


def without_bound(rows: pd.DataFrame) -> pd.DataFrame:
    none = rows[pd.to_numeric(rows["bound_gbps"], errors="coerce").isna()]
    if none.empty:
        return pd.DataFrame()
    return none.groupby("bound_reason").size().rename("rows").reset_index().rename(columns={"bound_reason": "why"})


def _bound_lines(rows: pd.DataFrame) -> dict:
    """op -> [(GB/s, label)] for the plot, at most three bounds per op."""
    ok = ok_rows(rows)
    ok = ok[pd.to_numeric(ok["bound_gbps"], errors="coerce") > 0]
    out: dict = {}
    for (op, link, gbps), _ in ok.groupby(["op", "bound_link", "bound_gbps"]) if not ok.empty else ():
        out.setdefault(op, []).append((float(gbps), f"bound {gbps:,.0f} GB/s ({link})"))
    return {op: lines[:3] for op, lines in out.items()}


def add(doc, report) -> None:
    from ....sysinfo.links_table import gpu_rows, nic_rows

    rows = with_bounds_runs(report.runs)
    sec = doc.section("Bounds: busbw against the links")
    sec.text("Each row's bound is the most busbw the slowest link it crossed can carry (NVLink or PCIe "
             "within a node, the NICs between nodes, HBM / 2 for a copy on one GPU), from the links "
             "run.json records; pct_of_bound = busbw / bound x 100. Rules and sources: docs/metrics.md, "
             "\"Bounds\". A bound is an upper limit: above 105% the bound is wrong.")
    for line in findings(rows):
        sec.text(line)
    sec.table(table(rows), "no row has both a bound and a positive busbw")
    lines = _bound_lines(rows)
    if lines:   # without a bound the plot would repeat Curves
        title = plot_title(rows, [r.meta for r in report.runs])
        fig = metric_figure(rows, "busbw_gbps", title, report.param_columns, bounds=lines)
        sec.image(figure_png(fig) if fig is not None else None, "busbw vs size with bounds", "busbw_bounds.png")
    missing = without_bound(rows)
    if not missing.empty:
        sec.sub("Rows without a bound").table(missing)
    for run in report.runs:
        links = (run.meta or {}).get("links")
        if links:
            host = run.meta.get("hostname")
            sub = sec.sub(f"Links of {run.label}" + (f" ({host})" if host else ""))
            sub.table(pd.DataFrame(gpu_rows(links)), "no GPU facts")
            if links.get("nics"):
                sub.table(pd.DataFrame(nic_rows(links)))
            for problem in links.get("problems") or []:
                sub.text(f"not read: {problem}")


SECTION = ReportSection("bounds", 25, add, applies)
