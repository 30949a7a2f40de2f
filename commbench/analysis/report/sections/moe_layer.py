"""The MoE family's layer view: per model and phase, dispatch / experts / combine per all2all backend
and the two-batch overlapped layer (report/moe_layer.py draws it)."""
from __future__ import annotations

from ..moe_layer import layer_figure, layer_table
from ..plots import figure_png
from .base import ReportSection


def applies(report) -> bool:
    return not layer_table(report.rows).empty


def add(doc, report) -> None:
    df = report.rows
    sec = doc.section("MoE layer")
    sec.text("Per model and phase, a bar per all2all backend: dispatch, experts and combine, "
             "each timed alone (stacked; the black mark is the serial layer), and beside it the "
             "layer with two-batch overlap (one micro-batch's dispatch overlapping the other's "
             "experts). comm_share = (dispatch + combine) / layer; overlap_gain = serial_us / "
             "layer_us; tokens_per_s per rank. Only ok rows.")
    fig = layer_figure(df)
    sec.image(figure_png(fig) if fig is not None else None, "MoE layer breakdown", "moe_layer.png")
    sec.table(layer_table(df))


SECTION = ReportSection("moe_layer", 50, add, applies, family="moe")
