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
    unstable = tables.unstable(df, params=params)
    _listed(sub, unstable.sort_values("p90_over_median", ascending=False, kind="stable") if len(unstable) > MAX_LISTED
            else unstable, "the most unstable first")
    _listed(sec.sub("Wrong results (wrong > 0)"), tables.wrong_rows(df, params), "in run order")
    _listed(sec.sub("Skipped, failed and timed-out points"), tables.not_ok_rows(df, params), "in run order")


MAX_LISTED = 200   # a fleet can have thousands of such rows: the first ones, and how many more


def _listed(sub, table, order: str) -> None:
    if len(table) > MAX_LISTED:
        sub.text(f"{len(table):,} points; the first {MAX_LISTED} are listed ({order}), every row is in results.csv.")
        table = table.head(MAX_LISTED)
    sub.table(table)


SECTION = ReportSection("warnings", 80, add)
