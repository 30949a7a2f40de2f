"""Per-rank steps: for a few training and MoE-layer Cases, every timed step of every rank split into
compute, copy, exposed communication and idle time from the stored timelines (report/rank_steps.py)."""
from __future__ import annotations

from ..plots import figure_png
from ..rank_steps import rank_figure, shown
from .base import ReportSection
from .timelines import case_name, rows_by_case


def applies(report) -> bool:
    return any(shown(run, limit=1) for run in report.runs)


def add(doc, report) -> None:
    many = len(report.runs) > 1
    sec = doc.section("Steps per rank")
    sec.text("Each rank's timed steps, one bar each, split from its timeline the way the rows are: compute, "
             "copy, exposed communication (communication with no compute beside it) and idle time stack to "
             "the step; hatched: the communication hidden under compute. A row's columns are its slowest rank's mean "
             "step. `commbench trace RUN --case ID` shows the same intervals in Perfetto.")
    for run in report.runs:
        cases = shown(run)
        if not cases:
            continue
        sub = sec.sub(run.label) if many else sec
        rows = rows_by_case(run)
        for cid, splits in cases:
            row = rows.get(cid) or {}
            what = " ".join(str(row.get(c)) for c in ("strategy", "overlap") if row.get(c) not in (None, ""))
            slowest = row.get("slowest_rank")
            fig = rank_figure(splits, f"{case_name(row)} {what} (case {cid})".strip(),
                              int(slowest) if slowest == slowest and slowest not in (None, "") else None)
            sub.image(figure_png(fig), f"steps per rank of case {cid}",
                      f"steps-{run.label.replace('/', '-')}-{cid}.png")


SECTION = ReportSection("step_timelines", 35, add, applies)
