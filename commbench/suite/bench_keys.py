"""One benchmark's keys read for expansion: the benchmark merged over the suite's defaults
(``BenchKeys``), and each key's values checked, with errors that name the line of the key they are
about (the benchmark's own, else the defaults'). Expansion (suite/expand.py) crosses what these
return; the sizes (suite/sizes.py) and the placement keys (suite/placement_keys.py) live apart."""
from __future__ import annotations

import math
import os
from pathlib import Path

from ..families import all_families
from ..families.base import Family
from ..errors import preview
from ..safety import suite_env_refusal
from .settings import MAX_DURATION_S
from .schema import ALIASES, BENCH_KEYS, ENV_NAME, PROFILES, TIMINGS, SuiteErrors, as_list
from .yaml_lines import LineDict

DEFAULT_TIMEOUT_S = 300
MIN_TIMEOUT_S = 1   # timeout_s: at least a second, at most settings.MAX_DURATION_S


class BenchKeys:
    """One benchmark being expanded: its keys merged over the defaults, and errors that name
    the line of the key they are about (the benchmark's own, else the defaults')."""

    def __init__(self, bench: LineDict, defaults: LineDict, where: str, err: SuiteErrors):
        self.bench, self.defaults, self.where, self.err = bench, defaults, where, err
        self.m = {ALIASES.get(k, k): v for src in (defaults, bench) for k, v in src.items()}

    def get(self, key: str, default=None):
        return self.m.get(key, default)

    def line(self, key: str) -> int:
        if "." in key:   # params.X, search.X, env.X: the line of X in its mapping
            top, sub = key.split(".", 1)
            inner = self.m.get(top)
            if isinstance(inner, LineDict) and sub in inner:
                return inner.line_of(sub)
            key = top
        for src in (self.bench, self.defaults):
            for k in (key, *[a for a, b in ALIASES.items() if b == key]):
                if k in src:
                    return src.line_of(k)
        return self.bench.line

    def add(self, key: str, msg: str, line: int | None = None) -> None:
        self.err.add(self.line(key) if line is None else line, f"{self.where}.{key}", msg)


def name(b: BenchKeys, seen_names: set) -> str:
    for key in b.bench:
        if ALIASES.get(key, key) not in BENCH_KEYS:
            b.add(key, f"unknown key (expected one of: {', '.join(BENCH_KEYS)})", b.bench.line_of(key))
    alias_conflicts(b)
    bname = b.get("name")
    if not isinstance(bname, str) or not bname:
        b.add("name", "required: a non-empty string", b.bench.line)
        bname = b.where
    elif name_problem(bname):
        b.add("name", name_problem(bname), b.bench.line_of("name"))
    elif bname in seen_names:
        b.add("name", f"duplicate benchmark name {bname!r}", b.bench.line_of("name"))
    seen_names.add(bname)
    return bname


def name_problem(text: str) -> str | None:
    """Why a suite or benchmark name cannot be used (None: it can): a control character (a NUL
    byte, a line end, a terminal escape) would reach file names, logs and terminals."""
    bad = next((c for c in text if ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0), None)
    if bad is None:
        return None
    return (f"{preview(text, 60)} holds the control character {bad!r} (U+{ord(bad):04X}): a name is "
            "printable text (it names files, log lines and report sections)")


def alias_conflicts(b: BenchKeys) -> None:
    """A key and its alias in one mapping (``backend`` and ``backends``): one would silently win."""
    for src in (b.bench, b.defaults):
        for alias, key in ALIASES.items():
            if alias in src and key in src:
                b.err.add(src.line_of(alias), f"{b.where}.{alias}",
                          f"both {alias!r} (line {src.line_of(alias)}) and {key!r} (line {src.line_of(key)}) "
                          f"are given: they are one key (an alias of {key}); keep one of them")


def family(b: BenchKeys) -> Family | None:
    fams = all_families()
    fam_name = b.get("family")
    if fam_name not in fams:
        b.add("family", f"unknown family {fam_name!r} (known: {', '.join(sorted(fams))})")
        return None
    return fams[fam_name]


def choose(b: BenchKeys, fam: Family, key: str, allowed, default) -> list:
    vals = as_list(b.get(key, default))
    if not vals:
        b.add(key, "empty list")
    for v in vals:
        if v not in allowed:
            b.add(key, f"unknown {key[:-1]} {v!r} for family {fam.name} (known: {', '.join(allowed)})")
    return vals


def counts(b: BenchKeys) -> dict:
    """warmup, iters, timeout_s, ranks_per_node: None means the default."""
    out = {}
    for key, default in (("warmup", None), ("iters", None), ("timeout_s", DEFAULT_TIMEOUT_S),
                         ("ranks_per_node", None)):
        v = default if b.get(key) is None else b.get(key)   # `key: null` means the default
        kinds = (float, int) if key == "timeout_s" else (int,)
        low = 0 if key == "warmup" else MIN_TIMEOUT_S if key == "timeout_s" else 1
        if v is not None and (isinstance(v, bool) or not isinstance(v, kinds) or not math.isfinite(v)
                              or v < low or (key == "timeout_s" and v > MAX_DURATION_S)):
            what = (f"a number of seconds from {MIN_TIMEOUT_S} to {MAX_DURATION_S:.0f} (30 days), the time a "
                    "Case may run without finishing before its launch is killed"
                    if key == "timeout_s" else "a whole number >= 0" if key == "warmup" else "a whole number >= 1")
            b.add(key, f"expected {what}, got {v!r}")
            v = default
        out[key] = v
    return out


def ranks(b: BenchKeys, gpu_count: int) -> list[tuple[int, int | None]]:
    """(ranks, ranks per node or None) for each value of `ranks`."""
    out = []
    for r in as_list(b.get("ranks", 1)):
        if r != "all" and (isinstance(r, bool) or not isinstance(r, int) or r < 1):
            b.add("ranks", f"expected a positive integer or 'all', got {r!r}")
            continue
        out.append(_resolve_ranks(r, gpu_count))
    return out


def timings(b: BenchKeys) -> list:
    timings = as_list(b.get("timing", "auto"))
    for timing in timings:
        if not isinstance(timing, str) or timing not in TIMINGS:
            b.add("timing", f"unknown timing {timing!r} (known: {', '.join(TIMINGS)})")
    return timings


def profile(b: BenchKeys) -> str:
    profile = b.get("profile", "none")
    profile = "none" if profile is None else profile
    if not isinstance(profile, str) or profile not in PROFILES:
        b.add("profile", f"unknown profile {profile!r} (known: {', '.join(PROFILES)})")
        return "none"
    return profile


def env_lists(b: BenchKeys) -> dict[str, list[str]]:
    env = b.get("env", {}) or {}
    if not isinstance(env, dict):
        b.add("env", "must be a mapping of variable -> value or list of values")
        return {}
    out = {}
    for k, v in env.items():
        line = env.line_of(k) if isinstance(env, LineDict) else b.bench.line
        if not isinstance(k, str) or not ENV_NAME.match(k):
            b.add("env", f"{k!r} is not a valid environment variable name", line)
            continue
        refusal = suite_env_refusal(k)
        if refusal:
            b.add(f"env.{k}", refusal, line)
            continue
        vals = as_list(v)
        if not all(isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in vals) or not vals:
            b.add(f"env.{k}", "values must be strings or numbers (quote booleans: \"1\")", line)
            continue
        out[str(k)] = [str(x) for x in vals]
    return out


def param_lists(b: BenchKeys, fam: Family, ranks_list: list[tuple[int, int | None]],
                 base_dir: Path | None = None) -> dict[str, list]:
    """Every family parameter's values (the default when the suite does not name it). Values
    are checked against their Param by ``fam.bench_problems``; a relative file path (a Param's
    ``file_suffixes``) is first made absolute from ``base_dir``, the suite file's folder."""
    params = b.get("params", {}) or {}
    if not isinstance(params, dict):
        b.add("params", "must be a mapping")
        params = {}
    out = {}
    for k, v in params.items():
        if k not in fam.params:
            known = ", ".join(fam.params) or "none"
            b.add(f"params.{k}", f"unknown parameter for family {fam.name} (known: {known})")
        elif isinstance(v, list) and not v:
            b.add(f"params.{k}", "empty list")
        else:
            out[k] = as_list(v)
    paths = {k: [_from_suite(x, fam.params[k].file_suffixes, base_dir) for x in v]
             for k, v in out.items() if fam.params[k].file_suffixes}
    out.update(paths)
    # the family sees ranks resolved ('all' -> the GPU count) to judge shapes against them
    seen = {**b.m, "ranks": [r for r, _ in ranks_list], **({"params": {**params, **paths}} if paths else {})}
    for field_name, msg in fam.bench_problems(seen):
        b.add(field_name, msg)
    return {k: out.get(k, [spec.default]) for k, spec in fam.params.items()}


def _from_suite(value, suffixes: tuple[str, ...], base_dir: Path | None):
    """A relative file path taken from the suite file's folder (other values as they are)."""
    if base_dir is None or not isinstance(value, str) or not value.strip().endswith(suffixes):
        return value
    path = Path(value.strip()).expanduser()
    return str(path) if path.is_absolute() else os.path.normpath(Path(base_dir).absolute() / path)


def _resolve_ranks(value, gpu_count: int) -> tuple[int, int | None]:
    """(ranks, ranks per node or None). `all`: inside a Slurm job, its tasks (and tasks per node);
    elsewhere every GPU of this node."""
    if value != "all":
        return int(value), None
    from ..world import slurm_allocation_tasks

    tasks, per_node = slurm_allocation_tasks()
    if tasks > 0:
        return tasks, per_node
    return max(1, gpu_count), None


def variant_label(env: dict[str, str], varying: list[str], values: dict[str, list] | None = None) -> str:
    """The results' ``variant``: the varying variables, a secret-looking one as NAME=<withheld> (or
    <withheld-N>, its place in the suite's list, when it takes several values)."""
    from ..sysinfo.machine import WITHHELD, is_secret

    def shown(k: str) -> str:
        if not is_secret(k, env[k]):
            return str(env[k])
        choices = [str(v) for v in (values or {}).get(k, [])]
        return f"<withheld-{choices.index(str(env[k])) + 1}>" if len(choices) > 1 and str(env[k]) in choices \
            else WITHHELD

    keys = varying or []
    return ",".join(f"{k}={shown(k)}" for k in keys) if keys else "default"
