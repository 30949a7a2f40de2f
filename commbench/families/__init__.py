"""Family registry: every package ``commbench/families/<name>/`` that defines FAMILY is a family.

A family is one package: ``__init__.py`` exports FAMILY (the Family subclass instance from
``family.py``); its ops, backends and helpers sit beside it. ``base.py`` is the interface.
"""
from __future__ import annotations

import importlib
import pkgutil

from .base import Family

_REGISTRY: dict[str, Family] | None = None


def all_families() -> dict[str, Family]:
    global _REGISTRY
    if _REGISTRY is None:
        found: dict[str, Family] = {}
        for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if not mod.ispkg or mod.name.startswith("_"):
                continue
            module = importlib.import_module(f"{__name__}.{mod.name}")
            fam = getattr(module, "FAMILY", None)
            if isinstance(fam, Family):
                found[fam.name] = fam
        _REGISTRY = found
    return _REGISTRY


def get_family(name: str) -> Family:
    fams = all_families()
    if name not in fams:
        raise KeyError(name)
    return fams[name]
