"""Checks on one benchmark's raw values that sweep expansion relies on, run before it:

- ``family`` is a name (not a list or mapping);
- no list names the same entry twice (it would measure one Case twice under one id);
- ``env`` names are plain variable names and values can be handed to a process (no NUL byte,
  bounded length and count);
- ``ranks`` and ``ranks_per_node`` stay within what the launcher can start (``limits``).

A benchmark that fails here is not expanded, so expansion never sees a value of the wrong shape."""
from __future__ import annotations

from ..errors import preview
from .limits import MAX_ENV_VALUE_CHARS, MAX_ENV_VARS, SuiteLimits
from .schema import ALIASES, ENV_NAME, SuiteErrors
from .yaml_lines import LineDict

LIST_KEYS = ("ops", "backends", "dtypes", "sizes", "ranks", "timing")


def _merged(bench: LineDict, defaults: LineDict) -> dict:
    """key -> (value, line) with the benchmark's keys over the defaults', aliases resolved."""
    out = {}
    for src in (defaults, bench):
        for k, v in src.items():
            if isinstance(k, str):
                out[ALIASES.get(k, k)] = (v, src.line_of(k))
    return out


def _duplicate(values: list):
    """The first entry listed twice (plain values only; other shapes are type errors later)."""
    seen = set()
    for v in values:
        if isinstance(v, (str, int, float, bool)) or v is None:
            key = (type(v).__name__, v)
            if key in seen:
                return v
            seen.add(key)
    return _NONE


_NONE = object()


def check_bench(bench: LineDict, defaults: LineDict, where: str, err: SuiteErrors,
                limits: SuiteLimits, gpu_count: int) -> bool:
    """Add every problem of ``bench`` (merged over ``defaults``) to ``err``; True when none."""
    before = err.count
    m = _merged(bench, defaults)
    if "family" in m and not isinstance(m["family"][0], str):
        err.add(m["family"][1], f"{where}.family", f"expected a family name, got {preview(m['family'][0])}")
    for key in LIST_KEYS:
        value, line = m.get(key, (None, 0))
        if isinstance(value, list):
            dup = _duplicate(value)
            if dup is not _NONE:
                err.add(line, f"{where}.{key}", f"{preview(dup)} is listed twice")
    params, pline = m.get("params", (None, 0))
    if isinstance(params, dict):
        for name, value in params.items():
            if isinstance(value, list):
                dup = _duplicate(value)
                if dup is not _NONE:
                    line = params.line_of(name) if isinstance(params, LineDict) else pline
                    err.add(line, f"{where}.params.{preview(name, 40, quote=False)}", f"{preview(dup)} is listed twice")
    _check_env(m.get("env", (None, 0)), where, err)
    _check_ranks(m, where, err, limits, gpu_count)
    return err.count == before


def _check_env(entry, where: str, err: SuiteErrors) -> None:
    env, line = entry
    if not isinstance(env, dict):
        return   # expansion says what an env must be
    if len(env) > MAX_ENV_VARS:
        err.add(line, f"{where}.env", f"{len(env)} variables; a benchmark may set at most {MAX_ENV_VARS}")
        return
    for name, value in env.items():
        at = env.line_of(name) if isinstance(env, LineDict) else line
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            err.add(at, f"{where}.env", f"{preview(name)} is not a valid environment variable name "
                                        "(letters, digits and _, not starting with a digit)")
            continue
        values = value if isinstance(value, list) else [value]
        dup = _duplicate(values)
        if dup is not _NONE:
            err.add(at, f"{where}.env.{name}", f"{preview(dup)} is listed twice")
        for v in values:
            text = v if isinstance(v, str) else None
            if text is not None and "\0" in text:
                err.add(at, f"{where}.env.{name}", "a value holds a NUL byte, which no process environment "
                                                   "can carry")
                break
            if text is not None and len(text) > MAX_ENV_VALUE_CHARS:
                err.add(at, f"{where}.env.{name}", f"a value of {len(text)} characters; at most "
                                                   f"{MAX_ENV_VALUE_CHARS}")
                break


def _check_ranks(m: dict, where: str, err: SuiteErrors, limits: SuiteLimits, gpu_count: int) -> None:
    most, how = limits.rank_limit(gpu_count)
    for key in ("ranks", "ranks_per_node"):
        value, line = m.get(key, (None, 0))
        for r in value if isinstance(value, list) else [value]:
            if isinstance(r, int) and not isinstance(r, bool) and r > most:
                err.add(line, f"{where}.{key}", f"{r} ranks is more than the {most} this launcher can start "
                                                f"({how})")
                break
