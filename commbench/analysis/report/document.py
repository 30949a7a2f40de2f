"""A tiny document model (sections of text, tables, images) rendered to HTML and Markdown."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class Image:
    png: bytes
    alt: str
    name: str  # file name used by the Markdown twin (e.g. 'busbw.png')


@dataclass
class Section:
    title: str
    items: list = field(default_factory=list)  # str (paragraph), pd.DataFrame, Image, Section

    def text(self, paragraph: str) -> "Section":
        self.items.append(paragraph)
        return self

    def table(self, df: pd.DataFrame, empty: str = "none") -> "Section":
        self.items.append(df if not df.empty else empty)
        return self

    def image(self, png: bytes | None, alt: str, name: str) -> "Section":
        if png:
            self.items.append(Image(png, alt, name))
        return self

    def sub(self, title: str) -> "Section":
        child = Section(title)
        self.items.append(child)
        return child


@dataclass
class Document:
    title: str
    sections: list[Section] = field(default_factory=list)

    def section(self, title: str) -> Section:
        sec = Section(title)
        self.sections.append(sec)
        return sec

    def images(self) -> list[Image]:
        found: list[Image] = []

        def walk(items):
            for it in items:
                if isinstance(it, Image):
                    found.append(it)
                elif isinstance(it, Section):
                    walk(it.items)
        for sec in self.sections:
            walk(sec.items)
        return found


def cell(value) -> str:
    """Human cell text: no 'nan', floats trimmed."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)
