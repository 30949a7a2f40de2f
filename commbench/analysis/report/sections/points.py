"""Tables: every row, per op, sizes with units; a run of more points than a reader scrolls through
(a fleet, a long sweep) gets per op and size the spread of its points instead (results.csv holds
every row, and the Curves section names the outlier curves)."""
from __future__ import annotations

from .. import tables
from .base import ReportSection

MAX_LISTED_ROWS = 2000   # more rows than this: their spread per op and size, not every row


def add(doc, report) -> None:
    sec = doc.section("Tables")
    rows = report.rows
    if len(rows) > MAX_LISTED_ROWS:
        sec.text(f"{len(rows):,} points, more than the {MAX_LISTED_ROWS:,} a table can show readably: per op and "
                 "size, the spread of the ok points (p5, median, p95 and the worst). Every row is in each run's "
                 "results.csv; the Curves section names the outlier curves; rows not ok are listed under "
                 "Warnings.")
        dist = tables.size_distribution(rows)
        for op, g in (dist.groupby("op", sort=True) if not dist.empty else ()):
            sec.sub(str(op)).table(g.drop(columns=["op"]))
        return
    for op, g in tables.points(rows).groupby("op", sort=True):
        sec.sub(str(op)).table(g.drop(columns=["op"]))


SECTION = ReportSection("tables", 60, add)
