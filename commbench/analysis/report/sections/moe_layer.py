"""The MoE family's layer view: per model and phase, the layer's step split per all2all backend and
overlap, and what two-batch overlap hid (report/moe_layer.py draws it)."""
from __future__ import annotations

from ..moe_layer import layer_figure, layer_table
from ._step_view import add_view
from .base import ReportSection

TEXT = ("Per model and phase, a bar per all2all backend and overlap: the layer's step split from a "
        "profiled batch's GPU timeline (the slowest rank's mean step): compute (the experts), "
        "exposed communication (dispatch or combine with no expert beside it) and idle time stack "
        "to the step; hatched: the communication hidden under the experts. dispatch_us, expert_us, "
        "combine_us: the GPU time in each part. With two_batch, tbo_hidden_us is the communication "
        "of each micro-batch that "
        "ran under the other's experts and tbo_gain_pct its share of all communication. layer_us is "
        "the unprofiled timed batch (step_us beside it shows the profiler's cost); overlap_gain = "
        "serial_us / layer_us. Only ok rows.")


def applies(report) -> bool:
    return not layer_table(report.rows).empty


def add(doc, report) -> None:
    add_view(doc, "MoE layer", TEXT, layer_figure(report.rows), "MoE layer breakdown", "moe_layer.png",
             layer_table(report.rows))


SECTION = ReportSection("moe_layer", 50, add, applies, family="moe")
