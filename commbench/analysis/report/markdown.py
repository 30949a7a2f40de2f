"""Render a Document to Markdown; images go to a folder next to the file."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .document import Document, Image, Link, Section, cell


def _html(text: str) -> str:
    """Markdown passes raw HTML through: text from a run folder (a reason, a bench name) must not
    become markup (a `<script>` in a cell stays text)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape(text: str) -> str:
    return _html(text).replace("|", "\\|").replace("\n", " ")


def table_md(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(_escape(str(c)) for c in df.columns) + " |"
    sep = "| " + " | ".join("---" for _ in df.columns) + " |"
    body = ["| " + " | ".join(_escape(cell(v)) for v in row) + " |"
            for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body])


def render(doc: Document, image_dir: str | None = None) -> str:
    """Markdown text; images are referenced as image_dir/name (omitted when image_dir is None)."""
    out = [f"# {_escape(doc.title)}", ""]

    def walk(sec: Section, depth: int) -> None:
        out.extend([f"{'#' * depth} {_escape(sec.title)}", ""])
        for it in sec.items:
            if isinstance(it, Section):
                walk(it, depth + 1)
            elif isinstance(it, pd.DataFrame):
                out.extend([table_md(it), ""])
            elif isinstance(it, Image):
                if image_dir is not None:
                    out.extend([f"![{_escape(it.alt)}]({image_dir}/{it.name})", ""])
            elif isinstance(it, Link):
                out.extend([f"[{_escape(it.text)}]({it.href})", ""])
            else:
                out.extend([_html(str(it)), ""])
    for sec in doc.sections:
        walk(sec, 2)
    return "\n".join(out).rstrip() + "\n"


def write(doc: Document, path: Path) -> Path:
    """Write path (.md) and its images into '<stem>_files/' beside it."""
    path = Path(path)
    images = doc.images()
    image_dir = None
    if images:
        folder = path.parent / f"{path.stem}_files"
        folder.mkdir(parents=True, exist_ok=True)
        for im in images:
            (folder / im.name).write_bytes(im.png)
        image_dir = folder.name
    path.write_text(render(doc, image_dir))
    return path
