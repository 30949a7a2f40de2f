"""Family registry: every module in this package that defines FAMILY is a family."""
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
            if mod.name.startswith("_") or mod.name == "base":
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
