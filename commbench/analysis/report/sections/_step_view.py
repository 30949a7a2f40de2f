"""What the training and MoE-layer sections share: a paragraph, the step-split figure, the table."""
from __future__ import annotations

import pandas as pd

from ..plots import figure_png


def add_view(doc, title: str, text: str, fig, alt: str, name: str, rows: pd.DataFrame) -> None:
    """A family's step view in the report: its paragraph, figure (when there is one) and table."""
    sec = doc.section(title)
    sec.text(text)
    sec.image(figure_png(fig) if fig is not None else None, alt, name)
    sec.table(rows)
