"""Tables: every row, per op, sizes with units."""
from __future__ import annotations

from .. import tables
from .base import ReportSection


def add(doc, report) -> None:
    sec = doc.section("Tables")
    for op, g in tables.points(report.rows).groupby("op", sort=True):
        sec.sub(str(op)).table(g.drop(columns=["op"]))


SECTION = ReportSection("tables", 60, add)
