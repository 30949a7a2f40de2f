"""Run metadata: each run's run.json (hosts, GPUs, versions, the filtered environment, launches)."""
from __future__ import annotations

from .. import tables
from .base import ReportSection


def add(doc, report) -> None:
    sec = doc.section("Run metadata")
    for run in report.runs:
        sec.sub(run.label).table(tables.metadata(run.meta), "no run.json")


SECTION = ReportSection("metadata", 70, add)
