"""Summary: best busbw and small-message latency per (run, op, backend, variant), and whether the
machine was busy or ranks shared a GPU."""
from __future__ import annotations

from .. import tables
from .base import ReportSection


def add(doc, report) -> None:
    from ....sysinfo.load import busy_reasons

    df = report.rows
    n_ok = int((df["status"] == "ok").sum()) if "status" in df.columns else 0
    sec = doc.section("Summary")
    sec.text(f"{len(df)} points, {n_ok} ok, over {len(report.runs)} run(s). Best busbw is the highest "
             f"busbw over sizes; small-message latency is the median time at the largest size "
             f"<= {tables.SMALL_MESSAGE_BYTES} B.")
    sec.table(tables.summary(df), "no ok points")
    if any(busy_reasons(r.meta.get("machine_load")) for r in report.runs):
        sec.text("Warning: the machine was busy during a run (see Warnings): its times may be noisy or slow.")
    if report.rehearsal:
        sec.text("Correctness rehearsal: " + report.rehearsal)


SECTION = ReportSection("summary", 10, add)
