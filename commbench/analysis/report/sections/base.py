"""What a report section is: a registered piece of the report, with its place and when it applies.

A module in this package defines ``SECTION``, a :class:`ReportSection`: its ``order`` (the report
writes sections by ascending order: leave gaps so a new one fits between), ``add(doc, report)``
which appends its part to the document, and ``applies(report)``, whether the rows call for it.
A family's own view (the MoE layer, the training step) names its ``family``: it applies only
when the rows hold that family's rows, and the family itself imports nothing of the report.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd


@dataclass(frozen=True)
class ReportInput:
    """What every section reads: the runs (runfolder.reader.Run), their rows in one frame (with a
    'run' column when there are several), the rehearsal sentence ("" unless ranks shared a GPU)
    the runs' parameter columns (from run.json: reader.param_columns) and the report's folder."""

    runs: list
    rows: pd.DataFrame
    rehearsal: str
    param_columns: list[str]
    out_dir: Path | None = None   # where the report goes: links to files beside the runs start here


def always(report: ReportInput) -> bool:
    return True


@dataclass(frozen=True)
class ReportSection:
    name: str
    order: int
    add: Callable[..., None]                     # add(doc: Document, report: ReportInput)
    applies: Callable[[ReportInput], bool] = always
    family: str | None = None                    # a family's view: only with rows of this family

    def applies_to(self, report: ReportInput) -> bool:
        if self.family is not None:
            rows = report.rows
            if "family" not in rows.columns or not (rows["family"].astype(str) == self.family).any():
                return False
        return self.applies(report)
