"""Per-rank timelines, as data: which Cases to show, one iteration of a Case per rank (with its
NCCL kernel channels when profiled), and the traces stored beside a run. The report draws them
(commbench/analysis/report/sections/timelines.py).

A Case is picked when it was profiled, else by the largest ``skew_us`` (the Cases
where ranks disagreed most). Its shown iteration is the one whose skew is the
median of the Case, so the picture is typical rather than the worst. Each rank
has the iteration from its start to its end on rank 0's clock and, when the Case
was profiled with nccl, each kernel channel's span.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..runfolder import timeline_files, trace_files
from . import chrome_trace

MAX_CASES = 4


@dataclass
class Iteration:
    """One timed iteration of a Case: each rank's span (``ranks``: rank, start_us, end_us, sorted by
    rank), the NCCL kernel events that overlap it (Chrome trace events, ``pid`` = rank) and its
    window ``lo_us`` .. ``hi_us`` on rank 0's clock."""

    case_id: str
    iteration: int
    ranks: pd.DataFrame
    lo_us: float
    hi_us: float
    kernels: list[dict] = field(default_factory=list)

    @property
    def late_rank(self):
        """The rank that started last."""
        return self.ranks.loc[self.ranks["start_us"].idxmax(), "rank"]


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


def typical_iteration_of(run_dir: Path, case_id: str) -> Iteration | None:
    """The typical iteration of a Case, per rank; None when the run has no timeline for it."""
    tl = timeline_files.load_timeline(run_dir)
    tl = tl[tl["case_id"] == case_id]
    if tl.empty:
        return None
    it = typical_iteration(tl)
    sel = tl[tl["iteration"] == it].sort_values("rank").reset_index(drop=True)
    lo, hi = float(sel["start_us"].min()), float(sel["end_us"].max())
    kernels = []
    try:
        doc = chrome_trace.case_trace(run_dir, case_id)
        kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"
                   and e["ts"] < hi and e["ts"] + e["dur"] > lo]
    except chrome_trace.TraceError:
        pass
    return Iteration(case_id, it, sel, lo, hi, kernels)


def shown_cases(run, warn=None) -> list[str]:
    """The Cases of a run (runfolder.reader.Run) whose timelines are worth showing; ``warn`` hears
    of a cut last line of timeline.csv (left out)."""
    return select_cases(run.results, timeline_files.load_timeline(run.path, warn))


def trace_links(run) -> list[tuple[str, str, str]]:
    """(case_id, kind, path relative to the run folder) of every trace stored in a run."""
    out = []
    df = run.results
    if "trace" in df.columns:
        for r in df[df["trace"].fillna("").astype(str) != ""].itertuples():
            out.append((str(r.case_id), "torch (Kineto)", str(r.trace)))
    for case_id in trace_files.chrome_traces(run.path):
        out.append((case_id, "merged Chrome", trace_files.chrome_rel(case_id)))
    return out
