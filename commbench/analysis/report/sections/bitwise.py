"""Bitwise repeatability (`check: bitwise`, docs/suites.md "Checks"): one line with how many points
were checked bit for bit and how many differ, then the points that differ with their first
difference (rank, repetition, element, bit), and the points checked only in part or not at all
with the reason (bitwise_note)."""
from __future__ import annotations

import pandas as pd

from ....units import format_size
from .base import ReportSection

HEAD = ("run", "bench", "op", "backend", "variant", "dtype", "in_place", "world_size")


def _checked(rows: pd.DataFrame) -> pd.DataFrame:
    if "bitwise_repeats" not in rows.columns:
        return rows.iloc[0:0]
    return rows[pd.to_numeric(rows["bitwise_repeats"], errors="coerce") > 0]


def _text(col: pd.Series) -> pd.Series:
    """A text column with empty cells as "" (an all-empty column reads as float NaN)."""
    return col.astype(object).where(col.notna(), "").astype(str)


def applies(report) -> bool:
    return not _checked(report.rows).empty


def _brief(df: pd.DataFrame, tail: list[str]) -> pd.DataFrame:
    out = df.copy()
    out["size"] = out["size_bytes"].map(lambda s: format_size(int(s)) if pd.notna(s) else "")
    cols = [c for c in HEAD if c in out.columns] + ["size"] + [c for c in tail if c in out.columns]
    return out[cols].reset_index(drop=True)


def summary_line(rows: pd.DataFrame) -> str:
    """'12 points checked bit for bit (10 repetitions each): 1 differs; 2 not checked (see below).'"""
    checked = _checked(rows)
    mismatch = pd.to_numeric(checked.get("bitwise_mismatch"), errors="coerce")
    compared = checked[mismatch.notna()]
    differ = int((mismatch > 0).sum())
    repeats = sorted({int(r) for r in pd.to_numeric(checked["bitwise_repeats"], errors="coerce").dropna()})
    each = (f"{repeats[0]} repetitions each" if len(repeats) == 1
            else f"{repeats[0]} to {repeats[-1]} repetitions")
    line = (f"{len(compared)} point(s) checked bit for bit ({each}): "
            + (f"{differ} differ (each is a `wrong` row)" if differ else "every repetition identical on every rank"))
    unchecked = len(checked) - len(compared)
    if unchecked:
        line += f"; {unchecked} point(s) not checked (their families offer no output view)"
    return line + "."


def add(doc, report) -> None:
    rows = _checked(report.rows)
    sec = doc.section("Bitwise repeatability")
    sec.text(summary_line(rows) + " Each point's op ran that many more times on identical inputs after its "
             "timing; every rank's output was compared bit for bit with its first repetition, and the first "
             "with the exact known answer where there is one (docs/results.md, bitwise_*).")
    mismatch = pd.to_numeric(rows.get("bitwise_mismatch"), errors="coerce")
    differ = rows[mismatch > 0]
    if not differ.empty:
        sec.sub("Points whose repetitions differ").table(
            _brief(differ, ["bitwise_mismatch", "bitwise_repeats", "bitwise_first"]))
    notes = rows[_text(rows["bitwise_note"]) != ""] if "bitwise_note" in rows.columns else rows.iloc[0:0]
    if not notes.empty:
        sec.sub("Checked in part or not at all").table(_brief(notes, ["bitwise_mismatch", "bitwise_note"]))


SECTION = ReportSection("bitwise", 29, add, applies)
