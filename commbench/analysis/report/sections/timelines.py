"""Rank timelines: one typical iteration of a few Cases drawn per rank (red: the rank that started
last; green: NCCL kernel channels when profiled), and links to the traces stored beside a run.
The data come from commbench.profile.timeline."""
from __future__ import annotations

import os
from pathlib import Path

from ....profile import timeline
from ....units import format_size
from ..document import Link
from ..plots import figure_png, plt
from .base import ReportSection


def iteration_figure(run_dir: Path, case_id: str, row: dict | None = None):
    """A matplotlib Figure of one iteration of a Case, per rank; None when there is nothing to draw."""
    it = timeline.typical_iteration_of(run_dir, case_id)
    if it is None:
        return None
    ranks = list(it.ranks["rank"])
    late = it.late_rank
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.45 * len(ranks)))
    for y, rr in enumerate(it.ranks.itertuples()):
        color = "#c44e52" if rr.rank == late and len(ranks) > 1 else "#4c72b0"
        ax.broken_barh([(rr.start_us - it.lo_us, rr.end_us - rr.start_us)], (y - 0.3, 0.36), color=color)
        ks = [(k["ts"] - it.lo_us, k["dur"]) for k in it.kernels if k["pid"] == rr.rank]
        if ks:
            ax.broken_barh(ks, (y + 0.1, 0.2), color="#55a868", alpha=0.6)
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel(f"us from the earliest start of iteration {it.iteration} (rank 0's clock)")
    what = ""
    if row is not None:
        what = f"{row.get('op', '')} {row.get('backend', '')} size {row.get('size_bytes', '')} B: "
    ax.set_title(f"{what}case {case_id}, iteration {it.iteration}; last to start: rank {late}"
                 + ("; green: NCCL kernel channels" if it.kernels else ""), fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def _shown(report, notes: list | None = None) -> list[tuple]:
    """(run, Case ids to draw, trace links) of each run with per-rank data; ``notes`` gets what
    was left out of a damaged timeline.csv."""
    out = []
    for run in report.runs:
        ids = timeline.shown_cases(run, notes.append if notes is not None else None)
        traces = timeline.trace_links(run)
        if ids or traces:
            out.append((run, ids, traces))
    return out


def applies(report) -> bool:
    return bool(_shown(report))


def add(doc, report) -> None:
    """"Rank timelines": pictures and trace links, per run when there are several."""
    many = len(report.runs) > 1
    sec = doc.section("Rank timelines")
    sec.text("Each rank's start and end of one timed iteration on rank 0's clock (offsets measured "
             "over MPI; docs/profiling.md). Red: the rank that started last. Columns skew_us and "
             "late_rank summarise every iteration. `commbench trace RUN --case ID` writes the whole "
             "Case as a Chrome trace.")
    notes: list[str] = []
    shown = _shown(report, notes)
    for note in dict.fromkeys(notes):
        sec.text(f"Left out: {note}")
    for run, ids, traces in shown:
        sub = sec.sub(run.label) if many else sec
        by_id = rows_by_case(run)
        for cid in ids:
            fig = iteration_figure(run.path, cid, by_id.get(cid))
            if fig is not None:
                sub.image(figure_png(fig), f"timeline of case {cid}",
                          f"timeline-{run.label.replace('/', '-')}-{cid}.png")
        for cid, label, rel in traces:
            sub.items.append(Link(f"{label} trace: {case_name(by_id.get(cid))} (case {cid})",
                                  _href(run, rel, report.out_dir, many)))


def rows_by_case(run) -> dict:
    """case_id -> the Case's first row in the run's results (the sections that draw a Case name it)."""
    df = run.results
    if "case_id" not in df.columns:
        return {}
    first = df.drop_duplicates("case_id")
    return first.set_index(first["case_id"].astype(str)).to_dict("index")


def case_name(row: dict | None) -> str:
    """What a Case measured, in words: op, size, backend (and variant, dtype, in-place when set)."""
    if not row:
        return "a Case not in results.csv"
    parts = [str(row.get("op") or "")]
    size = row.get("size_bytes")
    try:
        parts.append(format_size(int(size)))
    except (TypeError, ValueError):
        pass
    parts += [str(row.get(c)) for c in ("backend", "dtype") if row.get(c) not in (None, "")]
    if row.get("variant") not in (None, "", "default"):
        parts.append(str(row["variant"]))
    if str(row.get("in_place")) == "True":
        parts.append("in place")
    return " ".join(p for p in parts if p and p != "nan")


def _href(run, rel: str, out_dir: Path | None, many: bool) -> str:
    """The trace's path from the report's folder (known), else as a report of these runs lays it out."""
    if out_dir is not None:
        return os.path.relpath(Path(run.path) / rel, out_dir)
    return str(Path(run.path.name) / rel) if many else rel


SECTION = ReportSection("timelines", 40, add, applies)
