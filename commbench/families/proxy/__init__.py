"""The proxy family: CPU-proxy vs GPU-direct transfers, native bindings and per-Case state
(``family.py`` is the entry point)."""

from .family import FAMILY

__all__ = ["FAMILY"]
