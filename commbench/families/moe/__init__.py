"""The moe family: expert-parallel dispatch/combine with routing, references, byte accounting
and backends (``family.py`` is the entry point)."""

from .family import FAMILY

__all__ = ["FAMILY"]
