"""Sweep expansion: one benchmark of a suite (merged with its defaults) -> validated Cases.

Lists become cross products (ops x backends x dtypes x params x sizes x ranks x env variants)."""
from __future__ import annotations

import itertools
import math

from ..families import all_families
from ..families.base import Case, Family
from ..launch.safety import suite_env_refusal
from ..units import format_size, parse_size
from .limits import MAX_SIZE_BYTES, SuiteLimits, factor_sweep_points
from .schema import (ENV_NAME, ALIASES, BENCH_KEYS, LARGE_BYTES, PLACEMENTS, TIMINGS, SuiteErrors,
                     as_list)
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


def _check_type(value, types, err, line, where) -> bool:
    vals = as_list(value)
    for v in vals:
        if isinstance(v, bool) and bool not in types:
            err.add(line, where, f"expected {'/'.join(t.__name__ for t in types)}, got {v!r}")
            return False
        if not isinstance(v, types):
            err.add(line, where, f"expected {'/'.join(t.__name__ for t in types)}, got {v!r}")
            return False
    return True


def _resolve_ranks(value, gpu_count: int) -> int:
    return max(1, gpu_count) if value == "all" else int(value)


def _variant_label(env: dict[str, str], varying: list[str]) -> str:
    keys = varying or []
    return ",".join(f"{k}={env[k]}" for k in keys) if keys else "default"


def _merged(bench: LineDict, defaults: LineDict) -> dict:
    out = {}
    for src in (defaults, bench):
        for k, v in src.items():
            out[ALIASES.get(k, k)] = v
    return out


def _line(bench: LineDict, defaults: LineDict, key: str) -> int:
    for src in (bench, defaults):
        for k in (key, *[a for a, b in ALIASES.items() if b == key]):
            if k in src:
                return src.line_of(k)
    return bench.line


def expand_bench(bench: LineDict, defaults: LineDict, suite_name: str, where: str,
                  err: SuiteErrors, gpu_count: int, seen_names: set,
                  budget: SuiteLimits | None = None) -> list[Case]:
    for key in bench:
        if ALIASES.get(key, key) not in BENCH_KEYS:
            err.add(bench.line_of(key), f"{where}.{key}", f"unknown key (expected one of: {', '.join(BENCH_KEYS)})")
    m = _merged(bench, defaults)
    bname = m.get("name")
    if not isinstance(bname, str) or not bname:
        err.add(bench.line, f"{where}.name", "required: a non-empty string")
        bname = where
    elif bname in seen_names:
        err.add(bench.line_of("name"), f"{where}.name", f"duplicate benchmark name {bname!r}")
    seen_names.add(bname)
    where = f"{where} ({bname})"
    fams = all_families()
    fam_name = m.get("family")
    if fam_name not in fams:
        err.add(_line(bench, defaults, "family"), f"{where}.family",
                f"unknown family {fam_name!r} (known: {', '.join(sorted(fams))})")
        return []
    fam: Family = fams[fam_name]
    n_err = len(err.items)

    def choose(key: str, allowed, default):
        vals = as_list(m.get(key, default))
        if not vals:
            err.add(_line(bench, defaults, key), f"{where}.{key}", "empty list")
        for v in vals:
            if v not in allowed:
                err.add(_line(bench, defaults, key), f"{where}.{key}",
                        f"unknown {key[:-1]} {v!r} for family {fam.name} (known: {', '.join(allowed)})")
        return vals

    ops = choose("ops", fam.ops, list(fam.ops))
    backends = choose("backends", fam.backends, list(fam.backends[:1]))
    dtypes = choose("dtypes", fam.dtypes, [fam.default_dtype])
    budget = budget or SuiteLimits()
    sizes = expand_sizes(m.get("sizes", "1MiB"), err, _line(bench, defaults, "sizes"), f"{where}.sizes", budget)
    ints = {}
    for key, default in (("warmup", None), ("iters", None), ("timeout_s", 300), ("ranks_per_node", None)):
        v = default if m.get(key) is None else m.get(key)   # `key: null` means the default
        kinds = (float, int) if key == "timeout_s" else (int,)
        if v is not None and (isinstance(v, bool) or not isinstance(v, kinds) or not math.isfinite(v)
                              or v < (1 if key != "warmup" else 0)):
            what = "a positive number" if key == "timeout_s" else (
                "a whole number >= 0" if key == "warmup" else "a whole number >= 1")
            err.add(_line(bench, defaults, key), f"{where}.{key}", f"expected {what}, got {v!r}")
            v = default
        ints[key] = v
    ranks_list = []
    for r in as_list(m.get("ranks", 1)):
        if r != "all" and (isinstance(r, bool) or not isinstance(r, int) or r < 1):
            err.add(_line(bench, defaults, "ranks"), f"{where}.ranks", f"expected a positive integer or 'all', got {r!r}")
            continue
        ranks_list.append(_resolve_ranks(r, gpu_count))
    placement = m.get("placement", "together")
    host_groups: list[tuple[str, ...]] = [()]
    if placement not in PLACEMENTS:
        err.add(_line(bench, defaults, "placement"), f"{where}.placement",
                f"unknown placement {placement!r} (known: {', '.join(PLACEMENTS)})")
    elif placement != "together":
        from ..sysinfo.hosts import allocation_hosts, round_robin_pairs

        hosts = allocation_hosts()
        if placement == "per_node":
            host_groups = [(h,) for h in hosts]
        elif len(hosts) < 2:
            err.add(_line(bench, defaults, "placement"), f"{where}.placement",
                    f"pairs needs at least 2 hosts, found {hosts} (set COMMBENCH_HOSTS or run in a "
                    f"Slurm allocation)")
        else:
            host_groups = [pair for rnd in round_robin_pairs(hosts) for pair in rnd]
    timings = as_list(m.get("timing", "auto"))
    for timing in timings:
        if not isinstance(timing, str) or timing not in TIMINGS:
            err.add(_line(bench, defaults, "timing"), f"{where}.timing",
                    f"unknown timing {timing!r} (known: {', '.join(TIMINGS)})")
    env = m.get("env", {}) or {}
    if not isinstance(env, dict):
        err.add(_line(bench, defaults, "env"), f"{where}.env", "must be a mapping of variable -> value or list of values")
        env = {}
    env_lists = {}
    for k, v in env.items():
        if not isinstance(k, str) or not ENV_NAME.match(k):
            err.add(env.line_of(k) if isinstance(env, LineDict) else bench.line, f"{where}.env",
                    f"{k!r} is not a valid environment variable name")
            continue
        refusal = suite_env_refusal(k)
        if refusal:
            err.add(env.line_of(k) if isinstance(env, LineDict) else bench.line, f"{where}.env.{k}", refusal)
            continue
        vals = as_list(v)
        if not all(isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in vals) or not vals:
            err.add(env.line_of(k) if isinstance(env, LineDict) else bench.line, f"{where}.env.{k}",
                    "values must be strings or numbers (quote booleans: \"1\")")
            continue
        env_lists[str(k)] = [str(x) for x in vals]
    params = m.get("params", {}) or {}
    if not isinstance(params, dict):
        err.add(_line(bench, defaults, "params"), f"{where}.params", "must be a mapping")
        params = {}
    param_lists = {}
    for k, v in params.items():
        pline = params.line_of(k) if isinstance(params, LineDict) else bench.line
        spec = fam.params.get(k)
        if spec is None:
            known = ", ".join(fam.params) or "none"
            err.add(pline, f"{where}.params.{k}", f"unknown parameter for family {fam.name} (known: {known})")
            continue
        if isinstance(v, list) and not v:
            err.add(pline, f"{where}.params.{k}", "empty list")
            continue
        if not _check_type(v, spec.types, err, pline, f"{where}.params.{k}"):
            continue
        if spec.choices is not None:
            bad = [x for x in as_list(v) if x not in spec.choices]
            if bad:
                err.add(pline, f"{where}.params.{k}", f"{bad[0]!r} not in {list(spec.choices)}")
                continue
        param_lists[k] = as_list(v)
    for k, spec in fam.params.items():
        param_lists.setdefault(k, [spec.default])
    for field_name, msg in fam.validate_bench(m):
        err.add(_line(bench, defaults, field_name.split(".")[0]), f"{where}.{field_name}", msg)
    if len(err.items) > n_err:
        return []
    axes = (host_groups, ranks_list, ops, backends, dtypes, timings, *env_lists.values(),
            *param_lists.values(), sizes)
    refusal = budget.take_cases(math.prod(len(a) for a in axes))   # counted before any Case is built
    if refusal:
        err.add(bench.line, where, refusal)
        return []
    varying = [k for k, v in env_lists.items() if len(v) > 1] or list(env_lists)
    env_variants = [dict(zip(env_lists, combo)) for combo in itertools.product(*env_lists.values())] or [{}]
    pkeys = list(param_lists)
    cases = []
    for hosts, ranks, envv, op, backend, dtype, timing, pcombo, size in itertools.product(
            host_groups, ranks_list, env_variants, ops, backends, dtypes, timings,
            itertools.product(*param_lists.values()), sizes):
        rpn = int(ints["ranks_per_node"] or ranks)
        # placed: ranks_per_node ranks (default: `ranks`) on each named host of the group
        n_ranks = rpn * len(hosts) if hosts else ranks
        cases.append(Case(
            suite=suite_name, bench=bname, family=fam.name, op=op, backend=backend,
            variant=_variant_label(envv, varying), env=tuple(sorted(envv.items())),
            dtype=dtype, size_bytes=size, params=tuple(zip(pkeys, pcombo)),
            warmup=int(ints["warmup"]) if ints["warmup"] is not None else default_iters(size, True),
            iters=int(ints["iters"]) if ints["iters"] is not None else default_iters(size, False),
            timing=timing, ranks=n_ranks, ranks_per_node=min(rpn, n_ranks),
            timeout_s=float(ints["timeout_s"]), hosts=hosts))
    return cases
