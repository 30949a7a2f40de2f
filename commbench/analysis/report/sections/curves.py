"""Curves: busbw and time vs size, a panel per op, a line per run/backend/variant (and whatever
else varies: dtype, world size, a swept parameter)."""
from __future__ import annotations

from ..plots import figure_png, metric_figure, plot_title
from .base import ReportSection


def add(doc, report) -> None:
    df = report.rows
    sec = doc.section("Curves")
    sec.text("One panel per op; one line per run/backend/variant (and dtype, in_place, world "
             "size, timing where they vary). Only ok rows. Log axes; busbw 0 (one rank) is not drawn.")
    title = plot_title(df, [r.meta for r in report.runs]) + (" [rehearsal: ranks shared a GPU, not speed]"
                                                             if report.rehearsal else "")
    for metric, name in (("busbw_gbps", "busbw.png"), ("time_us", "time.png")):
        fig = metric_figure(df, metric, title, report.param_columns)
        sec.image(figure_png(fig) if fig is not None else None, f"{metric} vs size", name)


SECTION = ReportSection("curves", 20, add)
