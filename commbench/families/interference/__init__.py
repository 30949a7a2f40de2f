"""The interference family: a GEMM and a collective at once, each one's slowdown against running
alone (``family.py`` is the entry point; docs/families/interference.md)."""

from .family import FAMILY

__all__ = ["FAMILY"]
