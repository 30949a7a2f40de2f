"""Suites: the line-aware YAML loader (``yaml_lines``, shared with acceptance rules), the schema
(``schema``), sweep expansion (``expand``), `--set`/`--only` (``overrides``), launch groups
(``launches``) and ``load_suite`` (``loader``) that ties them together (docs/suites.md)."""
from __future__ import annotations

from .expand import default_iters, expand_sizes
from .launches import Launch, group_launches
from .loader import Suite, load_suite
from .overrides import ONLY_KEY, parse_overrides
from .schema import BENCH_KEYS, COMMON_KEYS, TOP_KEYS

__all__ = ["BENCH_KEYS", "COMMON_KEYS", "ONLY_KEY", "TOP_KEYS", "Launch", "Suite", "default_iters",
           "expand_sizes", "group_launches", "load_suite", "parse_overrides"]
