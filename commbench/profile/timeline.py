"""The report's "Rank timelines": one iteration of a few Cases drawn per rank, and links to traces.

A Case is picked when it was profiled, else by the largest ``skew_us`` (the Cases
where ranks disagreed most). Its drawn iteration is the one whose skew is the
median of the Case, so the picture is typical rather than the worst. Each rank
is a row: the iteration from its start to its end on rank 0's clock, and under
it, when the Case was profiled with nccl, each kernel channel's span.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import chrome_trace
from ..runfolder import timeline_files as store

MAX_CASES = 4


def select_cases(results: pd.DataFrame, timeline: pd.DataFrame, limit: int = MAX_CASES) -> list[str]:
    if timeline.empty or "case_id" not in results.columns:
        return []
    have = set(timeline["case_id"].astype(str))
    rows = results[results["case_id"].astype(str).isin(have)].copy()
    if rows.empty:
        return []
    prof = rows["profiled"] if "profiled" in rows.columns else pd.Series(None, index=rows.index, dtype=object)
    rows["_profiled"] = prof.notna() & (prof.astype(str) != "")   # an all-empty column reads as NaN
    rows["_skew"] = pd.to_numeric(rows.get("skew_us", pd.Series(0, index=rows.index)), errors="coerce").fillna(0)
    rows = rows.sort_values(["_profiled", "_skew"], ascending=False)
    return list(rows["case_id"].astype(str).head(limit))


def typical_iteration(tl: pd.DataFrame) -> int:
    """The iteration whose start skew across ranks is the median of the Case's."""
    spread = tl.groupby("iteration")["start_us"].agg(lambda s: s.max() - s.min()).sort_values()
    return int(spread.index[len(spread) // 2])


def iteration_figure(run_dir: Path, case_id: str, row: dict | None = None):
    """A matplotlib Figure of one iteration of a Case, per rank; None when there is nothing to draw."""
    from ..analysis.report.plots import plt

    tl = store.load_timeline(run_dir)
    tl = tl[tl["case_id"] == case_id]
    if tl.empty:
        return None
    it = typical_iteration(tl)
    sel = tl[tl["iteration"] == it].sort_values("rank")
    lo, hi = float(sel["start_us"].min()), float(sel["end_us"].max())
    kernels = []
    try:
        doc = chrome_trace.case_trace(run_dir, case_id)
        kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"
                   and e["ts"] < hi and e["ts"] + e["dur"] > lo]
    except chrome_trace.TraceError:
        pass
    ranks = list(sel["rank"])
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.45 * len(ranks)))
    late = sel.loc[sel["start_us"].idxmax(), "rank"]
    for y, r in enumerate(ranks):
        rr = sel[sel["rank"] == r].iloc[0]
        color = "#c44e52" if r == late and len(ranks) > 1 else "#4c72b0"
        ax.broken_barh([(rr.start_us - lo, rr.end_us - rr.start_us)], (y - 0.3, 0.36), color=color)
        ks = [(k["ts"] - lo, k["dur"]) for k in kernels if k["pid"] == r]
        if ks:
            ax.broken_barh(ks, (y + 0.1, 0.2), color="#55a868", alpha=0.6)
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel(f"us from the earliest start of iteration {it} (rank 0's clock)")
    what = ""
    if row is not None:
        what = f"{row.get('op', '')} {row.get('backend', '')} size {row.get('size_bytes', '')} B: "
    ax.set_title(f"{what}case {case_id}, iteration {it}; last to start: rank {late}"
                 + ("; green: NCCL kernel channels" if kernels else ""), fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def add_section(doc, runs) -> None:
    """Append "Rank timelines" (pictures) and "Traces" (links) for runs that have per-rank data."""
    from ..analysis.report.document import Link
    from ..analysis.report.plots import figure_png

    sec = None
    for run in runs:
        tl = store.load_timeline(run.path)
        ids = select_cases(run.results, tl)
        traces = _trace_links(run)
        if not ids and not traces:
            continue
        if sec is None:
            sec = doc.section("Rank timelines")
            sec.text("Each rank's start and end of one timed iteration on rank 0's clock (offsets measured "
                     "over MPI; docs/profiling.md). Red: the rank that started last. Columns skew_us and "
                     "late_rank summarise every iteration. `commbench trace RUN --case ID` writes the whole "
                     "Case as a Chrome trace.")
        sub = sec.sub(run.label) if len(runs) > 1 else sec
        by_id = run.results.set_index(run.results["case_id"].astype(str)).to_dict("index") if ids else {}
        for cid in ids:
            fig = iteration_figure(run.path, cid, by_id.get(cid))
            if fig is not None:
                sub.image(figure_png(fig), f"timeline of case {cid}", f"timeline-{run.label}-{cid}.png")
        for cid, label, rel in traces:
            sub.items.append(Link(f"{label} trace of case {cid}", str(Path(run.path.name) / rel)
                                  if len(runs) > 1 else rel))


def _trace_links(run) -> list[tuple[str, str, str]]:
    out = []
    df = run.results
    if "trace" in df.columns:
        for r in df[df["trace"].fillna("").astype(str) != ""].itertuples():
            out.append((str(r.case_id), "torch (Kineto)", str(r.trace)))
    for path in sorted((run.path / "traces" / "chrome").glob("*.json")):
        out.append((path.stem, "merged Chrome", str(path.relative_to(run.path))))
    return out
