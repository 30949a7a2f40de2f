"""Sweep expansion: one benchmark of a suite (merged with its defaults) -> validated Cases.

Lists become cross products (ops x backends x dtypes x params x sizes x ranks x env variants)."""
from __future__ import annotations

import dataclasses

import itertools
import math
import os
from pathlib import Path

from ..families import all_families
from ..families.base import Case, Family
from ..safety import suite_env_refusal
from ..units import format_size, parse_size
from .limits import MAX_SIZE_BYTES, SuiteLimits, factor_sweep_points
from .schema import (ENV_NAME, ALIASES, BENCH_KEYS, LARGE_BYTES, PLACEMENTS, PROFILES, SEARCH_DEFAULTS, TIMINGS,
                     SuiteErrors, as_list)
from .yaml_lines import LineDict


def expand_sizes(spec, err: SuiteErrors, line: int, where: str, budget: SuiteLimits | None = None) -> list[int]:
    """Sizes from a single value, a list, or a {min, max, factor|step} sweep (a sweep longer than
    ``budget`` allows is refused before it is built)."""
    budget = budget or SuiteLimits()
    try:
        if isinstance(spec, dict):
            unknown = set(spec) - {"min", "max", "factor", "step"}
            if unknown:
                raise ValueError(f"unknown key(s) {sorted(unknown)}: use min, max, factor or step")
            lo, hi = parse_size(spec.get("min", 0)), parse_size(spec["max"])
            if lo > hi:
                raise ValueError(f"min ({format_size(lo)}) is above max ({format_size(hi)})")
            if hi > MAX_SIZE_BYTES:
                raise ValueError(f"max ({format_size(hi)}) is above the largest size, {format_size(MAX_SIZE_BYTES)} "
                                 "(no device holds more)")
            if "step" in spec:
                step = parse_size(spec["step"])
                if step <= 0:
                    raise ValueError("step must be > 0")
                refusal = budget.sizes_refusal(len(range(lo, hi + 1, step)))
                if refusal:
                    raise ValueError(refusal)
                return list(range(lo, hi + 1, step))
            factor = spec.get("factor", 2)
            if not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor <= 1:
                raise ValueError(f"factor must be a number > 1, got {factor!r}")
            if lo <= 0:
                raise ValueError("min must be > 0 for a factor sweep")
            refusal = budget.sizes_refusal(factor_sweep_points(lo, hi, factor))
            if refusal:
                raise ValueError(refusal)
            out, s = [], float(lo)
            while s <= hi * (1 + 1e-9):
                out.append(int(round(s)))
                s *= factor
            return sorted(set(out))  # a small factor can round two steps to one size
        sizes = [parse_size(v) for v in as_list(spec)]
        if not sizes:
            raise ValueError("no sizes given")
        if max(sizes) > MAX_SIZE_BYTES:
            raise ValueError(f"{format_size(max(sizes))} is above the largest size, {format_size(MAX_SIZE_BYTES)} "
                             "(no device holds more)")
        if len(set(sizes)) != len(sizes):
            raise ValueError("the same size is listed twice")
        return sizes
    except KeyError as exc:
        err.add(line, where, f"missing {exc.args[0]!r}")
    except ValueError as exc:
        err.add(line, where, str(exc))
    return []


def default_iters(size_bytes: int, warmup: bool) -> int:
    """Defaults that keep large messages from dominating the wall time."""
    base, floor = (5, 2) if warmup else (20, 5)
    if size_bytes <= LARGE_BYTES:
        return base
    return max(floor, int(base * LARGE_BYTES / size_bytes))


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


def _variant_label(env: dict[str, str], varying: list[str], values: dict[str, list] | None = None) -> str:
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


class _Bench:
    """One benchmark being expanded: its keys merged over the defaults, and errors that name
    the line of the key they are about (the benchmark's own, else the defaults')."""

    def __init__(self, bench: LineDict, defaults: LineDict, where: str, err: SuiteErrors):
        self.bench, self.defaults, self.where, self.err = bench, defaults, where, err
        self.m = {ALIASES.get(k, k): v for src in (defaults, bench) for k, v in src.items()}

    def get(self, key: str, default=None):
        return self.m.get(key, default)

    def line(self, key: str) -> int:
        if key.startswith("params."):
            params = self.m.get("params")
            if isinstance(params, LineDict) and key[7:] in params:
                return params.line_of(key[7:])
            key = "params"
        for src in (self.bench, self.defaults):
            for k in (key, *[a for a, b in ALIASES.items() if b == key]):
                if k in src:
                    return src.line_of(k)
        return self.bench.line

    def add(self, key: str, msg: str, line: int | None = None) -> None:
        self.err.add(self.line(key) if line is None else line, f"{self.where}.{key}", msg)


def _name(b: _Bench, seen_names: set) -> str:
    for key in b.bench:
        if ALIASES.get(key, key) not in BENCH_KEYS:
            b.add(key, f"unknown key (expected one of: {', '.join(BENCH_KEYS)})", b.bench.line_of(key))
    bname = b.get("name")
    if not isinstance(bname, str) or not bname:
        b.add("name", "required: a non-empty string", b.bench.line)
        bname = b.where
    elif bname in seen_names:
        b.add("name", f"duplicate benchmark name {bname!r}", b.bench.line_of("name"))
    seen_names.add(bname)
    return bname


def _family(b: _Bench) -> Family | None:
    fams = all_families()
    fam_name = b.get("family")
    if fam_name not in fams:
        b.add("family", f"unknown family {fam_name!r} (known: {', '.join(sorted(fams))})")
        return None
    return fams[fam_name]


def _choose(b: _Bench, fam: Family, key: str, allowed, default) -> list:
    vals = as_list(b.get(key, default))
    if not vals:
        b.add(key, "empty list")
    for v in vals:
        if v not in allowed:
            b.add(key, f"unknown {key[:-1]} {v!r} for family {fam.name} (known: {', '.join(allowed)})")
    return vals


def _counts(b: _Bench) -> dict:
    """warmup, iters, timeout_s, ranks_per_node: None means the default."""
    out = {}
    for key, default in (("warmup", None), ("iters", None), ("timeout_s", 300), ("ranks_per_node", None)):
        v = default if b.get(key) is None else b.get(key)   # `key: null` means the default
        kinds = (float, int) if key == "timeout_s" else (int,)
        if v is not None and (isinstance(v, bool) or not isinstance(v, kinds) or not math.isfinite(v)
                              or v < (1 if key != "warmup" else 0)):
            what = "a positive number" if key == "timeout_s" else (
                "a whole number >= 0" if key == "warmup" else "a whole number >= 1")
            b.add(key, f"expected {what}, got {v!r}")
            v = default
        out[key] = v
    return out


def _ranks(b: _Bench, gpu_count: int) -> list[tuple[int, int | None]]:
    """(ranks, ranks per node or None) for each value of `ranks`."""
    out = []
    for r in as_list(b.get("ranks", 1)):
        if r != "all" and (isinstance(r, bool) or not isinstance(r, int) or r < 1):
            b.add("ranks", f"expected a positive integer or 'all', got {r!r}")
            continue
        out.append(_resolve_ranks(r, gpu_count))
    return out


def _host_groups(b: _Bench) -> list[tuple[str, ...]]:
    """() = anywhere; else one group per host (per_node) or per pair of hosts (pairs); for search, one
    group of every host (the template the launcher places wave by wave: launch/search_run.py)."""
    placement = b.get("placement", "together")
    if placement not in PLACEMENTS:
        b.add("placement", f"unknown placement {placement!r} (known: {', '.join(PLACEMENTS)})")
        return [()]
    if placement == "together":
        return [()]
    from ..sysinfo.hosts import allocation_hosts, round_robin_pairs

    hosts = allocation_hosts()
    if placement == "per_node":
        return [(h,) for h in hosts]
    if len(hosts) < 2:
        b.add("placement", f"{placement} needs at least 2 hosts, found {hosts} (set COMMBENCH_HOSTS or run in a "
                           f"Slurm allocation)")
        return [()]
    if placement == "search":
        return [tuple(hosts)]
    return [pair for rnd in round_robin_pairs(hosts) for pair in rnd]


def _search_settings(b: _Bench) -> tuple[tuple[str, object], ...]:
    """placement: search's settings (schema.SEARCH_DEFAULTS filled in), or () for other placements."""
    given = b.get("search")
    if b.get("placement", "together") != "search":
        if "search" in b.bench:   # under defaults it serves the benchmarks that search
            b.add("search", "applies to placement: search only")
        return ()
    given = {} if given is None else given
    if not isinstance(given, dict):
        b.add("search", f"a mapping of {', '.join(SEARCH_DEFAULTS)}")
        return tuple(SEARCH_DEFAULTS.items())
    out = dict(SEARCH_DEFAULTS)
    for key, value in given.items():
        default = SEARCH_DEFAULTS.get(key)
        if default is None:
            b.add(f"search.{key}", f"unknown setting (known: {', '.join(SEARCH_DEFAULTS)})")
        elif isinstance(default, str):
            if not isinstance(value, str) or not value.strip():
                b.add(f"search.{key}", f"a results column name, got {value!r}")
            else:
                out[key] = value
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or (isinstance(default, int) and not isinstance(value, int)) \
                or value < (0 if key in ("seed", "matchings") else 1 if isinstance(default, int) else 0) \
                or (key == "min_share" and value > 1):
            what = ("a whole number >= 0" if key in ("seed", "matchings") else "a whole number >= 1"
                    if isinstance(default, int) else "a number in 0..1" if key == "min_share" else "a number >= 0")
            b.add(f"search.{key}", f"expected {what}, got {value!r}")
        else:
            out[key] = value
    return tuple(out.items())


def _wave_of(groups: list[tuple[str, ...]]) -> dict[tuple[str, ...], int]:
    """The wave of each host group, in order: a group joins the current wave while it shares no
    host with it (all per_node groups: wave 0; pairs: one round of disjoint pairs a wave)."""
    waves, wave, busy = {}, 0, set()
    for group in groups:
        if not group:
            continue
        if busy & set(group):
            wave, busy = wave + 1, set()
        busy |= set(group)
        waves[group] = wave
    return waves


def _timings(b: _Bench) -> list:
    timings = as_list(b.get("timing", "auto"))
    for timing in timings:
        if not isinstance(timing, str) or timing not in TIMINGS:
            b.add("timing", f"unknown timing {timing!r} (known: {', '.join(TIMINGS)})")
    return timings


def _profile(b: _Bench) -> str:
    profile = b.get("profile", "none")
    profile = "none" if profile is None else profile
    if not isinstance(profile, str) or profile not in PROFILES:
        b.add("profile", f"unknown profile {profile!r} (known: {', '.join(PROFILES)})")
        return "none"
    return profile


def _env_lists(b: _Bench) -> dict[str, list[str]]:
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


def _param_lists(b: _Bench, fam: Family, ranks_list: list[tuple[int, int | None]],
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


def _field_value(case: Case, field_name: str):
    """The value a Case took for a suite field (as `Family.impossible` names fields)."""
    if field_name.startswith("params."):
        return case.param(field_name[7:])
    attr = {"ops": "op", "backends": "backend", "dtypes": "dtype", "sizes": "size_bytes"}.get(field_name, field_name)
    return getattr(case, attr)


def _reject_values_that_never_run(b: _Bench, fam: Family, cases: list[Case]) -> None:
    """A suite value whose every Case is an impossible combination is an error; a value that
    runs in some combinations leaves skipped rows for the others (a sweep may cross them)."""
    conflicts = {c.case_id: fam.impossible(c) for c in cases}
    blamed: dict[tuple, str] = {}
    for c in cases:
        hit = conflicts[c.case_id]
        if hit:
            blamed.setdefault((hit[0], _field_value(c, hit[0])), hit[1])
    for (field_name, value), reason in blamed.items():
        if all(conflicts[c.case_id] for c in cases if _field_value(c, field_name) == value):
            shown = format_size(value) if field_name == "sizes" else repr(value)
            b.add(field_name, f"{shown} never runs: {reason}")


def expand_bench(bench: LineDict, defaults: LineDict, suite_name: str, where: str,
                 err: SuiteErrors, gpu_count: int, seen_names: set,
                 budget: SuiteLimits | None = None, base_dir: Path | None = None) -> list[Case]:
    """The validated Cases of one benchmark; problems go to ``err`` (then no Case is returned).
    ``base_dir``: the suite file's folder, where relative file parameters are taken from."""
    b = _Bench(bench, defaults, where, err)
    bname = _name(b, seen_names)
    b.where = f"{where} ({bname})"
    fam = _family(b)
    if fam is None:
        return []
    n_err = len(err.items)
    ops = _choose(b, fam, "ops", fam.ops, list(fam.ops))
    backends = _choose(b, fam, "backends", fam.backends, list(fam.backends[:1]))
    dtypes = _choose(b, fam, "dtypes", fam.dtypes, [fam.default_dtype])
    budget = budget or SuiteLimits()
    sizes = expand_sizes(b.get("sizes", "1MiB"), err, b.line("sizes"), f"{b.where}.sizes", budget)
    counts = _counts(b)
    ranks_list = _ranks(b, gpu_count)
    host_groups = _host_groups(b)
    search = _search_settings(b)
    timings = _timings(b)
    profile = _profile(b)
    env_lists = _env_lists(b)
    param_lists = _param_lists(b, fam, ranks_list, base_dir)
    if len(err.items) > n_err:
        return []
    axes = (host_groups, ranks_list, ops, backends, dtypes, timings, *env_lists.values(),
            *param_lists.values(), sizes)
    refusal = budget.take_cases(math.prod(len(a) for a in axes))   # counted before any Case is built
    if refusal:
        err.add(bench.line, b.where, refusal)
        return []
    varying = [k for k, v in env_lists.items() if len(v) > 1] or list(env_lists)
    env_variants = [dict(zip(env_lists, combo)) for combo in itertools.product(*env_lists.values())] or [{}]
    pkeys = list(param_lists)
    params = b.get("params", {}) or {}
    # written in the suite: presets never override these
    explicit = frozenset(params if isinstance(params, dict) else ())
    cases = []
    wave_of = _wave_of(host_groups)
    for hosts, (ranks, per_node), envv, op, backend, dtype, timing, pcombo, size in itertools.product(
            host_groups, ranks_list, env_variants, ops, backends, dtypes, timings,
            itertools.product(*param_lists.values()), sizes):
        rpn = int(counts["ranks_per_node"] or per_node or ranks)
        # placed: ranks_per_node ranks (default: `ranks`) on each named host of the group; a search's
        # template holds one node's ranks (its groups get rpn x their hosts: launch/search_run.py)
        n_ranks = rpn if search else rpn * len(hosts) if hosts else ranks
        cases.append(fam.finalize_case(Case(
            suite=suite_name, bench=bname, family=fam.name, op=op, backend=backend,
            variant=_variant_label(envv, varying, env_lists), env=tuple(sorted(envv.items())),
            dtype=dtype, size_bytes=size, params=tuple(zip(pkeys, pcombo)),
            warmup=int(counts["warmup"]) if counts["warmup"] is not None else default_iters(size, True),
            iters=int(counts["iters"]) if counts["iters"] is not None else default_iters(size, False),
            timing=timing, ranks=n_ranks, ranks_per_node=min(rpn, n_ranks),
            timeout_s=float(counts["timeout_s"]), hosts=hosts,
            profile="" if profile == "none" else profile), explicit))
        if search:   # the launcher runs it wave by wave; its settings travel with the template
            cases[-1] = dataclasses.replace(cases[-1], params=cases[-1].params + (("search", search),))
        elif hosts:   # the `wave` column: launches of one wave run at the same time (launch/waves.py)
            cases[-1] = dataclasses.replace(cases[-1], params=cases[-1].params + (("wave", wave_of[hosts]),))
    _reject_values_that_never_run(b, fam, cases)
    return [] if len(err.items) > n_err else cases
