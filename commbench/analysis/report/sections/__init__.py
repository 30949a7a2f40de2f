"""Report sections registry: every module of this package that defines SECTION (a
base.ReportSection) is a section, found like the families are (commbench/families/__init__.py).
build.py writes those that apply to the rows, by ascending ``order``. A family's own view is a
section here keyed by the family's name (``family=``), so families never import the report.
"""
from __future__ import annotations

import importlib
import pkgutil

from .base import ReportInput, ReportSection

__all__ = ["ReportInput", "ReportSection", "all_sections"]

_REGISTRY: list[ReportSection] | None = None


def all_sections() -> list[ReportSection]:
    """Every registered section, by (order, name)."""
    global _REGISTRY
    if _REGISTRY is None:
        found: list[ReportSection] = []
        for mod in pkgutil.iter_modules(__path__):
            if mod.ispkg or mod.name.startswith("_") or mod.name == "base":
                continue
            section = getattr(importlib.import_module(f"{__name__}.{mod.name}"), "SECTION", None)
            if isinstance(section, ReportSection):
                found.append(section)
        _REGISTRY = sorted(found, key=lambda s: (s.order, s.name))
    return list(_REGISTRY)
