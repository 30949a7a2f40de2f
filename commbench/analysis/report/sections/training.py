"""The training family's view: where a step's time goes, per strategy (report/training.py draws it)."""
from __future__ import annotations

from ._step_view import add_view
from ..training import overlap_figure, overlap_table
from .base import ReportSection

TEXT = ("Per op, one bar per strategy: the step split from the GPU's timeline (the host's on the CPU), "
        "the slowest rank's mean step: compute, copy, exposed communication (communication with no "
        "compute beside it) and idle time stack to the step; the communication that ran hidden "
        "under compute is hatched over the top of the compute part (red and hatched: all communication). "
        "exposed_comm_sub_us is the old estimate (step minus the step run without communication), kept "
        "as a cross-check. docs/families/training.md defines the columns.")


def applies(report) -> bool:
    return not overlap_table(report.rows).empty


def add(doc, report) -> None:
    add_view(doc, "Training step: compute and communication", TEXT, overlap_figure(report.rows),
             "training step breakdown", "training.png", overlap_table(report.rows))


SECTION = ReportSection("training", 30, add, applies, family="training")
