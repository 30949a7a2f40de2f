"""Curves: busbw and time vs size, a panel per op, a line per run/backend/variant (and whatever
else varies: dtype, world size, a swept parameter, the node or pair of a placed run). A panel with
more curves than a reader can follow shows its outliers and a band for the rest (curve_band.py),
and the section lists every outlier. Rows that are not one op timed per message size (a training
row is a whole step) are left to their family's own section."""
from __future__ import annotations

from .. import curve_band
from ..plots import curve_outliers, figure_panels, figure_png, metric_figure, plot_title
from .base import ReportSection

# Families whose rows are not a curve over message size: a busbw "curve" of training steps (a
# handful of step times at the model's gradient sizes) reads as noise; the training section
# shows where each step's time goes instead.
NOT_SIZE_CURVES = ("training",)
BAND_TEXT = (f"A panel with more than {curve_band.MAX_CURVES} curves draws a band for the others (their median, "
             f"p5-p95 and min-max per size) and names its outliers: a curve whose median ratio to the per-size "
             f"median of all curves is at least {curve_band.MIN_EFFECT:.0%} off and whose robust z (median and "
             f"MAD across the curves) is {curve_band.OUTLIER_Z:g} or more; at most {curve_band.MAX_LABELLED} "
             "are drawn per panel, the table lists them all.")


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
             "size, timing, node or pair where they vary). Only ok rows. Log axes; busbw 0 (one rank) is not drawn."
             + (" Training steps are not drawn here (their section shows them)." if len(df) < len(report.rows)
                else ""))
    title = plot_title(df, [r.meta for r in report.runs]) + (" [rehearsal: ranks shared a GPU, not speed]"
                                                             if report.rehearsal else "")
    for metric, name in (("busbw_gbps", "busbw.png"), ("time_us", "time.png")):
        fig = metric_figure(df, metric, title, report.param_columns)
        sec.image(figure_png(fig) if fig is not None else None, f"{metric} vs size", name)
        _outlier_table(sec, metric, [p for p in figure_panels(df, metric, report.param_columns) if p.banded])


def _outlier_table(sec, metric: str, banded: list) -> None:
    """The banded panels' outliers of ``metric`` (nothing when no panel is banded)."""
    if not banded:
        return
    sub = sec.sub(f"Outlier curves: {metric}")
    sub.text(BAND_TEXT)
    sub.table(curve_outliers(banded), f"none: every curve of {', '.join(p.op for p in banded)} is within "
                                      f"{curve_band.MIN_EFFECT:.0%} or robust z {curve_band.OUTLIER_Z:g} of the others")


SECTION = ReportSection("curves", 20, add, applies)
