"""Burn-in: each node's time over the passes of a `run --duration` folder (drift from the first to
the last pass, spread across passes, the worst pass) and a plot of it, and each GPU's health counters
pass by pass where they drifted (with the time each moved). Data: analysis/burnin.py,
analysis/burnin_health.py."""
from __future__ import annotations

from ... import burnin, burnin_health
from ..plots import figure_png, plt
from .base import ReportSection
from commbench.runfolder.schema import PASS_COLUMN

_CACHE: dict = {}


def _burnins(report) -> list[tuple]:
    """(run, its rows of every pass with rel_time) of each run that is a burn-in of 2+ passes."""
    out = []
    for run in report.runs:
        if PASS_COLUMN not in run.results.columns and PASS_COLUMN not in run.samples.columns:
            continue   # no pass ended (accept/drift.py's maybe_burnin says why): no reading every row back
        key = (str(run.path), (run.path / "results.jsonl").stat().st_mtime_ns
               if (run.path / "results.jsonl").exists() else 0)
        if key not in _CACHE:
            _CACHE.clear()   # one report at a time: keep only the latest folder read
            df = burnin.pass_rows(run.path)
            _CACHE[key] = burnin.relative_time(df) if not df.empty and df["pass"].nunique() > 1 else None
        if _CACHE[key] is not None and not _CACHE[key].empty:
            out.append((run, _CACHE[key]))
    return out


def applies(report) -> bool:
    return bool(_burnins(report))


def pass_figure(table, title: str):
    """Per-pass relative time, a line per node (1.0: each Case's usual time on that node)."""
    fig, ax = plt.subplots(figsize=(8, 4))
    for node, values in table.iterrows():
        values = values.dropna()
        ax.plot(list(values.index), list(values.values), marker="o", label=str(node))
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("pass")
    ax.set_ylabel("time / the Case's median over passes")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    if len(table) <= 16:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def add(doc, report) -> None:
    sec = doc.section("Burn-in")
    sec.text("The suite ran pass after pass (`run --duration`). Per node and pass: the median over its ok "
             "points of time_us divided by the point's median over all passes (1.0: usual; above: "
             "slower). Drift: first to last pass, positive when the node got slower; spread: (max - "
             "min) / median across passes; worst pass: the slowest. `commbench accept` fails a node "
             "on these with a rule's drift_pct / spread_pct (docs/accept.md).")
    many = len(report.runs) > 1
    for run, df in _burnins(report):
        sub = sec.sub(run.label) if many else sec
        table = burnin.per_pass(df, "rel_time")
        passes = sorted(df["pass"].unique())
        sub.text(f"{len(passes)} passes ({passes[0]} to {passes[-1]}), {df['case_id'].nunique()} points, "
                 f"{df['node'].nunique()} node(s).")
        sub.table(burnin.trend_table(burnin.trends(table, "time_us")))
        sub.image(figure_png(pass_figure(table, f"{run.label}: time per pass, relative")),
                  "relative time per pass and node", f"burnin-{run.label.replace('/', '-')}.png")
        health_drift(sub, run, df)


def health_drift(sec, run, df) -> None:
    """The GPU health counters that moved over the passes (nothing without health records)."""
    table = burnin_health.health_per_pass(run.path, df)
    if table.empty:
        return
    drift = burnin_health.health_drift(table)
    sub = sec.sub("GPU health over the passes")
    sub.text(f"{table[['node', 'gpu']].drop_duplicates().shape[0]} GPU(s) on {table['node'].nunique()} node(s), "
             f"health read at the start and end of every launch (health.jsonl). Listed: a counter that moved "
             "the wrong way: ECC errors or remapped rows that grew, an XID, time throttled (thermal, power "
             f"brake) that grew from the first pass, a temperature {burnin_health.DRIFT_TEMP_C:g} C or more "
             "above the first pass's, a PCIe generation below the first pass's. Each move names its pass, "
             "the time of the health record that showed it, and when that pass ended (its rows' pass_utc).")
    sub.table(drift, "none: no health counter drifted over the passes")


SECTION = ReportSection("burnin", 27, add, applies)
