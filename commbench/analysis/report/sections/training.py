"""The training family's view: where a step's time goes, per strategy (report/training.py draws it)."""
from __future__ import annotations

from ..plots import figure_png
from ..training import overlap_figure, overlap_table
from .base import ReportSection


def applies(report) -> bool:
    return not overlap_table(report.rows).empty


def add(doc, report) -> None:
    df = report.rows
    sec = doc.section("Training step: compute and communication")
    sec.text("Per op, one bar per strategy: compute (the step with communication removed), "
             "exposed communication (step - compute) and hidden communication (the rest of the "
             "communication time, which ran under compute). docs/families/training.md defines the columns.")
    fig = overlap_figure(df)
    sec.image(figure_png(fig) if fig is not None else None, "training step breakdown", "training.png")
    sec.table(overlap_table(df))


SECTION = ReportSection("training", 30, add, applies, family="training")
