"""Curves: busbw and time vs size, a panel per op, a line per run/backend/variant (and whatever
else varies: dtype, world size, a swept parameter). Rows that are not one op timed per message
size (a training row is a whole step) are left to their family's own section."""
from __future__ import annotations

from ..plots import figure_png, metric_figure, plot_title
from .base import ReportSection

# Families whose rows are not a curve over message size: a busbw "curve" of training steps (a
# handful of step times at the model's gradient sizes) reads as noise; the training section
# shows where each step's time goes instead.
NOT_SIZE_CURVES = ("training",)


def curve_rows(df):
    if "family" not in df.columns:
        return df
    return df[~df["family"].astype(str).isin(NOT_SIZE_CURVES)]


def applies(report) -> bool:
    return report.rows.empty or not curve_rows(report.rows).empty


def add(doc, report) -> None:
    df = curve_rows(report.rows)
    sec = doc.section("Curves")
    sec.text("One panel per op; one line per run/backend/variant (and dtype, in_place, world "
             "size, timing where they vary). Only ok rows. Log axes; busbw 0 (one rank) is not drawn."
             + (" Training steps are not drawn here (their section shows them)." if len(df) < len(report.rows)
                else ""))
    title = plot_title(df, [r.meta for r in report.runs]) + (" [rehearsal: ranks shared a GPU, not speed]"
                                                             if report.rehearsal else "")
    for metric, name in (("busbw_gbps", "busbw.png"), ("time_us", "time.png")):
        fig = metric_figure(df, metric, title, report.param_columns)
        sec.image(figure_png(fig) if fig is not None else None, f"{metric} vs size", name)


SECTION = ReportSection("curves", 20, add, applies)
