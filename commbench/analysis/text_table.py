"""Plain-text tables for the terminal: aligned columns, no Markdown pipes, no colour codes, the
same on a terminal, in a pipe and in a CI log."""
from __future__ import annotations

import numbers

import numpy as np
import pandas as pd

from .report.document import cell

GAP = "  "


def _is_number(value) -> bool:
    return isinstance(value, (numbers.Real, np.number)) and not isinstance(value, (bool, np.bool_))


def text_table(df: pd.DataFrame) -> str:
    """The frame as aligned text: a header, a rule, one line per row; numbers right-aligned."""
    cols = [str(c) for c in df.columns]
    rows = [list(r) for r in df.itertuples(index=False)]
    texts = [[cell(v).replace("\n", " ") for v in r] for r in rows]
    widths = [max([len(c), *(len(t[i]) for t in texts)]) for i, c in enumerate(cols)]
    right = [bool(rows) and all(_is_number(r[i]) or cell(r[i]) == "" for r in rows) for i in range(len(cols))]

    def line(values) -> str:
        return GAP.join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)).rstrip()

    return "\n".join([line(cols), line(["-" * w for w in widths]), *(line(t) for t in texts)])
