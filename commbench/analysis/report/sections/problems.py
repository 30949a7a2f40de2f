"""Warnings: a busy machine, ranks that shared a GPU, unstable points, wrong results, and every
skipped, failed and timed-out point with its reason."""
from __future__ import annotations

from .. import tables
from .base import ReportSection


def add(doc, report) -> None:
    from ....sysinfo.load import describe

    df = report.rows
    sec = doc.section("Warnings")
    busy = [w for w in (describe(r.label, r.meta) for r in report.runs) if w]
    if busy:
        sub = sec.sub("Busy machine")
        for w in busy:
            sub.text(w)
    if report.rehearsal:
        sec.sub("Ranks shared a GPU").text(report.rehearsal)
    sub = sec.sub("Unstable points")
    sub.text(f"ok points whose p90 time is more than {tables.UNSTABLE_P90_OVER_MEDIAN}x the "
             "median: the median hides a slow tail; rerun with more iterations or find the noise.")
    params = report.param_columns
    sub.table(tables.unstable(df, params=params))
    sec.sub("Wrong results (wrong > 0)").table(tables.wrong_rows(df, params))
    sec.sub("Skipped, failed and timed-out points").table(tables.not_ok_rows(df, params))


SECTION = ReportSection("warnings", 80, add)
