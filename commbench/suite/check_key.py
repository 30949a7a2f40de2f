"""A benchmark's `check:` key (docs/suites.md, "Checks"): how closely its results are checked.

    check: values                          # the default: every element against its known answer
    check: bitwise                         # and 10 repetitions compared bit for bit
    check: {mode: bitwise, repeats: 50}    # the same with 50 repetitions

The values check always runs. `bitwise` adds measure/bitwise.py's pass: the Case's
``bitwise_repeats`` (not part of its case_id: the same point, checked more closely).
"""
from __future__ import annotations

import dataclasses

from ..families.base import Case
from ..measure.bitwise import DEFAULT_REPEATS, MAX_REPEATS
from .schema import CHECK_MODES, SuiteErrors
from .yaml_lines import LineDict

CHECK_SETTINGS = ("mode", "repeats")


def _source(bench: LineDict, defaults: LineDict) -> tuple[object, int] | None:
    """(the benchmark's check value, its line): the benchmark's own, else the defaults'."""
    for src in (bench, defaults):
        if isinstance(src, LineDict) and "check" in src:
            return src["check"], src.line_of("check")
    return None


def _repeats(value, line: int, where: str, err: SuiteErrors) -> int:
    if isinstance(value, str):
        if value not in CHECK_MODES:
            err.add(line, where, f"unknown check {value!r} (known: {', '.join(CHECK_MODES)}, or "
                                 f"{{mode: bitwise, repeats: N}})")
            return 0
        return DEFAULT_REPEATS if value == "bitwise" else 0
    if not isinstance(value, dict):
        err.add(line, where, f"expected {' or '.join(CHECK_MODES)} or {{mode: bitwise, repeats: N}}, got {value!r}")
        return 0
    unknown = [k for k in value if k not in CHECK_SETTINGS]
    if unknown:
        err.add(line, where, f"unknown setting(s) {unknown} (known: {', '.join(CHECK_SETTINGS)})")
        return 0
    mode = value.get("mode", "bitwise")
    if mode not in CHECK_MODES:
        err.add(line, f"{where}.mode", f"unknown mode {mode!r} (known: {', '.join(CHECK_MODES)})")
        return 0
    repeats = value.get("repeats", DEFAULT_REPEATS if mode == "bitwise" else 0)
    if mode == "values":
        if "repeats" in value:
            err.add(line, f"{where}.repeats", "applies to mode: bitwise only")
        return 0
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 2 <= repeats <= MAX_REPEATS:
        err.add(line, f"{where}.repeats", f"expected a whole number 2..{MAX_REPEATS} (repetition 1 is the "
                                          f"reference of the others), got {repeats!r}")
        return 0
    return repeats


def with_check(cases: list[Case], bench: LineDict, defaults: LineDict, where: str,
               err: SuiteErrors) -> list[Case]:
    """The benchmark's Cases with its `check:` applied (problems go to ``err``)."""
    found = _source(bench, defaults)
    if found is None:
        return cases
    repeats = _repeats(found[0], found[1], f"{where}.check", err)
    return [dataclasses.replace(c, bitwise_repeats=repeats) for c in cases] if repeats else cases
