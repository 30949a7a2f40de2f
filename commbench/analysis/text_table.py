"""Plain-text tables for the terminal: aligned columns, no Markdown pipes, no colour codes, the
same on a terminal, in a pipe and in a CI log, except that a long column may be folded to fit a
terminal's width (a pipe or a log keeps every cell on one line, whole for grep)."""
from __future__ import annotations

import numbers
import os
import shutil
import sys
import textwrap

import numpy as np
import pandas as pd

from .report.document import cell

GAP = "  "
MIN_WRAP_WIDTH = 24   # a wrapped column keeps at least this much, however narrow the terminal


def _is_number(value) -> bool:
    return isinstance(value, (numbers.Real, np.number)) and not isinstance(value, (bool, np.bool_))


def text_table(df: pd.DataFrame, wrap: str | None = None, width: int | None = None) -> str:
    """The frame as aligned text: a header, a rule, one line per row; numbers right-aligned.

    ``wrap`` names a column whose long cells are folded onto more lines (the other cells of those
    lines left blank) so that a line fits ``width`` characters (``terminal_width()``); that column
    keeps at least MIN_WRAP_WIDTH when the others leave less. No ``width``: nothing is folded."""
    cols = [str(c) for c in df.columns]
    rows = [list(r) for r in df.itertuples(index=False)]
    texts = [[cell(v).replace("\n", " ") for v in r] for r in rows]
    widths = [max([len(c), *(len(t[i]) for t in texts)]) for i, c in enumerate(cols)]
    right = [bool(rows) and all(_is_number(r[i]) or cell(r[i]) == "" for r in rows) for i in range(len(cols))]
    lines = [[t] for t in texts]
    if wrap in cols and width:
        k = cols.index(wrap)
        room = width - sum(w for i, w in enumerate(widths) if i != k) - len(GAP) * (len(cols) - 1)
        fold = max(room, MIN_WRAP_WIDTH, len(cols[k]))
        if widths[k] > fold:
            widths[k], lines = fold, [_folded(t, k, fold) for t in texts]

    def line(values) -> str:
        return GAP.join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)).rstrip()

    body = [line(part) for row in lines for part in row]
    return "\n".join([line(cols), line(["-" * w for w in widths]), *body])


def terminal_width(stream=None) -> int | None:
    """The width to fold a table to: the terminal's (COLUMNS when set) when ``stream`` (stdout) is
    one or COLUMNS is set, else None (a pipe or a log: nothing folded)."""
    stream = stream if stream is not None else sys.stdout
    if os.environ.get("COLUMNS") or (hasattr(stream, "isatty") and stream.isatty()):
        return shutil.get_terminal_size().columns
    return None


def _folded(texts: list[str], k: int, fold: int) -> list[list[str]]:
    """One row's cells as lines: column ``k`` wrapped at ``fold``, the others on the first line."""
    parts = textwrap.wrap(texts[k], fold, break_long_words=True, break_on_hyphens=False) or [""]
    first = texts[:k] + [parts[0]] + texts[k + 1:]
    return [first, *([""] * k + [p] + [""] * (len(texts) - k - 1) for p in parts[1:])]
