"""Render a Document to one self-contained HTML file (PNG plots inlined as base64)."""
from __future__ import annotations

import base64
import html
from pathlib import Path

import pandas as pd

from .document import Document, Image, Section, cell

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
img{max-width:100%;border:1px solid #eee}
.worse,.fail,.failed,.timeout,.wrong{background:#fdd}.better,.pass{background:#dfd}
.skipped,.not-comparable{background:#ffe9b3}
nav a{margin-right:1em}
"""
# Cells whose text is one of these get a CSS class, so verdicts stand out.
_MARKED = {"worse", "better", "fail", "pass", "failed", "timeout", "wrong", "skipped",
           "not comparable"}


def _table(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = []
    for row in df.itertuples(index=False):
        tds = []
        for v in row:
            text = cell(v)
            cls = f' class="{text.replace(" ", "-")}"' if text in _MARKED else ""
            tds.append(f"<td{cls}>{html.escape(text)}</td>")
        rows.append("<tr>" + "".join(tds) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _anchor(title: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in title.lower())


def render(doc: Document) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(doc.title)}</title><style>{_CSS}</style></head><body>",
             f"<h1>{html.escape(doc.title)}</h1>", "<nav>"]
    parts += [f'<a href="#{_anchor(s.title)}">{html.escape(s.title)}</a>' for s in doc.sections]
    parts.append("</nav>")

    def walk(sec: Section, depth: int) -> None:
        parts.append(f'<h{depth} id="{_anchor(sec.title)}">{html.escape(sec.title)}</h{depth}>')
        for it in sec.items:
            if isinstance(it, Section):
                walk(it, min(depth + 1, 6))
            elif isinstance(it, pd.DataFrame):
                parts.append(_table(it))
            elif isinstance(it, Image):
                data = base64.b64encode(it.png).decode("ascii")
                parts.append(f'<p><img alt="{html.escape(it.alt)}" src="data:image/png;base64,{data}"></p>')
            else:
                parts.append(f"<p>{html.escape(str(it))}</p>")
    for sec in doc.sections:
        walk(sec, 2)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write(doc: Document, path: Path) -> Path:
    path = Path(path)
    path.write_text(render(doc))
    return path
