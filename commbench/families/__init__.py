"""Family registry: every package ``commbench/families/<name>/`` whose ``family.py`` defines
FAMILY (an instance of a Family subclass) is a family; its ops, backends and helpers sit beside
``family.py``. ``base.py`` is the interface. A package's ``__init__`` imports nothing, so one
helper module (an op table, a routing generator) can be imported without its family.
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
            try:
                module = importlib.import_module(f"{__name__}.{mod.name}.family")
            except ModuleNotFoundError as exc:
                if exc.name != f"{__name__}.{mod.name}.family":
                    raise
                continue   # a package of shared helpers, not a family
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
