"""Summary: best busbw and small-message latency per (run, op, backend, variant), and whether the
machine was busy or ranks shared a GPU."""
from __future__ import annotations

from .. import tables
from .base import ReportSection
from .curves import curve_rows


def add(doc, report) -> None:
    from ....sysinfo.load import busy_reasons

    df = report.rows
    n_ok = int((df["status"] == "ok").sum()) if "status" in df.columns else 0
    sec = doc.section("Summary")
    sec.text(f"{len(df)} points, {n_ok} ok, over {len(report.runs)} run(s). Best busbw is the highest "
             f"busbw over sizes; small-message latency is the median time at the largest size "
             f"<= {tables.SMALL_MESSAGE_BYTES} B.")
    sized = curve_rows(df)   # a training step has no "best busbw": its own section shows it
    sec.table(tables.summary(sized), "no ok points" if len(sized) == len(df) else "no ok points besides training steps")
    if len(sized) < len(df):
        sec.text("Training steps are summarised in their own section (step, compute and exposed "
                 "communication), not here.")
    if any(busy_reasons(r.meta.get("machine_load")) for r in report.runs):
        sec.text("Warning: the machine was busy during a run (see Warnings): its times may be noisy or slow.")
    if report.rehearsal:
        sec.text("Correctness rehearsal: " + report.rehearsal)


SECTION = ReportSection("summary", 10, add)
