"""YAML suite -> validated Suite -> expanded Cases -> launch groups (docs/suites.md)."""
from __future__ import annotations

import dataclasses
import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import SuiteError
from .families import all_families
from .families.base import Case, Family
from .units import format_size, parse_size
from .yaml_lines import LineDict, LineList, load_yaml

TIMINGS = ("auto", "events", "pipelined", "graph", "host")

# Keys valid both under `defaults:` and in a benchmark, with their help text.
COMMON_KEYS: dict[str, str] = {
    "ops": "operation or list of operations of the family (alias: op)",
    "backends": "backend or list of backends (alias: backend)",
    "dtypes": "element type or list (alias: dtype)",
    "sizes": "message sizes: a size ('64KiB'), a list, or {min, max, factor} / {min, max, step}",
    "ranks": "ranks per launch: an integer, 'all' (every GPU of the node), or a list",
    "ranks_per_node": "ranks on each node (default: all ranks on one node)",
    "timeout_s": "seconds a Case may run without finishing before its launch is killed (default 300)",
    "warmup": "untimed iterations before timing (default 5, fewer for messages over 64 MiB)",
    "iters": "timed iterations (default 20, fewer for messages over 64 MiB, never under 5)",
    "timing": "auto | events | pipelined | graph | host (auto: CUDA events on GPU, host clock on CPU)",
    "env": "environment variables for the launch; a list of values makes one variant (fresh launch) each",
    "params": "family parameters (see `commbench list`); lists expand to cross products",
    "placement": "together (default) | per_node (one launch per host) | pairs (every pair of hosts, "
                 "in rounds of disjoint pairs); hosts from COMMBENCH_HOSTS or the Slurm allocation",
}
PLACEMENTS = ("together", "per_node", "pairs")
BENCH_KEYS: dict[str, str] = {"name": "benchmark name (unique in the suite)",
                              "family": "benchmark family (see `commbench list`)", **COMMON_KEYS}
TOP_KEYS: dict[str, str] = {
    "name": "suite name (used in the run folder name)",
    "description": "free text",
    "defaults": "keys applied to every benchmark unless it sets them",
    "benchmarks": "list of benchmarks",
    "rules": "acceptance rules (read by `commbench accept`, ignored by `run`)",
}
ALIASES = {"op": "ops", "backend": "backends", "dtype": "dtypes"}
LARGE_BYTES = 64 * 1024**2
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Launch:
    """One MPI job: Cases sharing (ranks, ranks_per_node, environment)."""

    launch_id: int
    ranks: int
    ranks_per_node: int
    env: tuple[tuple[str, str], ...]
    variant: str
    case_ids: tuple[str, ...]
    hosts: tuple[str, ...] = ()


@dataclass
class Suite:
    name: str
    path: Path
    cases: list[Case] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)


class _Errors:
    def __init__(self, path: Path):
        self.path, self.items = path, []

    def add(self, line: int, where: str, msg: str) -> None:
        self.items.append(f"{self.path}:{line}: {where}: {msg}")

    def raise_if_any(self) -> None:
        if self.items:
            head = f"{self.path}: invalid suite ({len(self.items)} problem(s))"
            raise SuiteError(head + "\n  " + "\n  ".join(self.items))


def _as_list(value) -> list:
    return list(value) if isinstance(value, list) else [value]


def expand_sizes(spec, err: _Errors, line: int, where: str) -> list[int]:
    """Sizes from a single value, a list, or a {min, max, factor|step} sweep."""
    try:
        if isinstance(spec, dict):
            unknown = set(spec) - {"min", "max", "factor", "step"}
            if unknown:
                raise ValueError(f"unknown key(s) {sorted(unknown)}: use min, max, factor or step")
            lo, hi = parse_size(spec.get("min", 0)), parse_size(spec["max"])
            if lo > hi:
                raise ValueError(f"min ({format_size(lo)}) is above max ({format_size(hi)})")
            if "step" in spec:
                step = parse_size(spec["step"])
                if step <= 0:
                    raise ValueError("step must be > 0")
                return list(range(lo, hi + 1, step))
            factor = spec.get("factor", 2)
            if not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor <= 1:
                raise ValueError(f"factor must be a number > 1, got {factor!r}")
            if lo <= 0:
                raise ValueError("min must be > 0 for a factor sweep")
            out, s = [], float(lo)
            while s <= hi * (1 + 1e-9):
                out.append(int(round(s)))
                s *= factor
            return sorted(set(out))  # a small factor can round two steps to one size
        sizes = [parse_size(v) for v in _as_list(spec)]
        if not sizes:
            raise ValueError("no sizes given")
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
    vals = _as_list(value)
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


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, object]:
    """`--set key=value` items -> {key: value}; values are YAML scalars or lists ('ranks=2', 'sizes=[1MiB]')."""
    out: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        top = key.split(".", 1)[0]
        if not sep or not key or (top not in COMMON_KEYS and top not in ALIASES) or top == "params" and "." not in key:
            raise SuiteError(f"--set {item!r}: expected KEY=VALUE with KEY one of "
                             f"{', '.join(k for k in COMMON_KEYS if k != 'params')} or params.NAME")
        try:
            out[key] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SuiteError(f"--set {item!r}: value is not valid YAML: {exc}") from None
    return out


def _apply_overrides(benches, overrides: dict[str, object]) -> None:
    """Set each override in every benchmark (params.NAME inside its params)."""
    for bench in benches:
        if not isinstance(bench, LineDict):
            continue
        for key, value in overrides.items():
            if key.startswith("params."):
                params = bench.get("params")
                if not isinstance(params, dict):
                    params = LineDict()
                    params.line, params.key_lines = bench.line, {}
                    bench["params"] = params
                    bench.key_lines["params"] = bench.line
                params[key.split(".", 1)[1]] = value
            else:
                for alias, full in ALIASES.items():  # `op` in the suite, `ops` on the command line
                    if full == ALIASES.get(key, key):
                        bench.pop(alias, None)
                bench[ALIASES.get(key, key)] = value
                bench.key_lines.setdefault(ALIASES.get(key, key), bench.line)


ONLY_KEY = "only"   # overrides[ONLY_KEY]: benchmark names kept (`run --only`)


def _keep_only(suite: "Suite", names: list[str]) -> None:
    """Keep the Cases of the named benchmarks; launch ids and Case ids stay those of the whole suite."""
    known = list(dict.fromkeys(c.bench for c in suite.cases))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SuiteError(f"{suite.path}: --only {', '.join(map(str, unknown))}: no such benchmark "
                         f"(the suite has: {', '.join(map(str, known))})")
    suite.cases = [c for c in suite.cases if c.bench in names]
    kept = {c.case_id for c in suite.cases}
    launches = []
    for launch in suite.launches:
        ids = tuple(cid for cid in launch.case_ids if cid in kept)
        if ids:
            launches.append(dataclasses.replace(launch, case_ids=ids))
    suite.launches = launches


def load_suite(path: Path | str, *, gpu_count: int | None = None,
               overrides: dict[str, object] | None = None) -> Suite:
    """Load, validate and expand a suite. Raises SuiteError listing every problem found.

    ``overrides`` (from `--set`) replace a key in every benchmark before validation;
    ``overrides["only"]`` (from `--only`) keeps just the benchmarks it names."""
    path = Path(path)
    raw = load_yaml(path)
    err = _Errors(path)
    if not isinstance(raw, LineDict):
        err.add(getattr(raw, "line", 1), "suite", "a suite is a mapping with 'name' and 'benchmarks'")
        err.raise_if_any()
    overrides = dict(overrides or {})
    only = overrides.pop(ONLY_KEY, None)
    if overrides and isinstance(raw.get("benchmarks"), list):
        _apply_overrides(raw["benchmarks"], overrides)
    for key in raw:
        if key not in TOP_KEYS:
            err.add(raw.line_of(key), str(key), f"unknown key (expected one of: {', '.join(TOP_KEYS)})")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        err.add(raw.line_of("name"), "name", "required: a non-empty string")
        name = path.stem
    defaults = raw.get("defaults", LineDict())
    if not isinstance(defaults, LineDict):
        err.add(raw.line_of("defaults"), "defaults", "must be a mapping")
        defaults = LineDict()
    else:
        for key in defaults:
            if ALIASES.get(key, key) not in COMMON_KEYS:
                err.add(defaults.line_of(key), f"defaults.{key}", "unknown key")
    benches = raw.get("benchmarks")
    if not isinstance(benches, LineList) or not benches:
        err.add(raw.line_of("benchmarks"), "benchmarks", "required: a non-empty list of benchmarks")
        benches = LineList()
    if gpu_count is None:
        gpu_count = _gpu_count_hint()
    suite = Suite(name=name, path=path)
    seen_names: set[str] = set()
    for i, bench in enumerate(benches):
        where = f"benchmarks[{i}]"
        if not isinstance(bench, LineDict):
            err.add(benches.line_of(i), where, "each benchmark is a mapping")
            continue
        suite.cases.extend(_expand_bench(bench, defaults, name, where, err, gpu_count, seen_names))
    err.raise_if_any()
    suite.launches = group_launches(suite.cases)
    if only:
        _keep_only(suite, list(only))
    return suite


def _gpu_count_hint() -> int:
    from .gpus import gpu_count

    return gpu_count()


def _expand_bench(bench: LineDict, defaults: LineDict, suite_name: str, where: str,
                  err: _Errors, gpu_count: int, seen_names: set) -> list[Case]:
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
        vals = _as_list(m.get(key, default))
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
    sizes = expand_sizes(m.get("sizes", "1MiB"), err, _line(bench, defaults, "sizes"), f"{where}.sizes")
    ints = {}
    for key, default in (("warmup", None), ("iters", None), ("timeout_s", 300), ("ranks_per_node", None)):
        v = m.get(key, default)
        kinds = (float, int) if key == "timeout_s" else (int,)
        if v is not None and (isinstance(v, bool) or not isinstance(v, kinds) or not math.isfinite(v)
                              or v < (1 if key != "warmup" else 0)):
            what = "a positive number" if key == "timeout_s" else (
                "a whole number >= 0" if key == "warmup" else "a whole number >= 1")
            err.add(_line(bench, defaults, key), f"{where}.{key}", f"expected {what}, got {v!r}")
            v = default
        ints[key] = v
    ranks_list = []
    for r in _as_list(m.get("ranks", 1)):
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
        from .hosts import allocation_hosts, round_robin_pairs

        hosts = allocation_hosts()
        if placement == "per_node":
            host_groups = [(h,) for h in hosts]
        elif len(hosts) < 2:
            err.add(_line(bench, defaults, "placement"), f"{where}.placement",
                    f"pairs needs at least 2 hosts, found {hosts} (set COMMBENCH_HOSTS or run in a "
                    f"Slurm allocation)")
        else:
            host_groups = [pair for rnd in round_robin_pairs(hosts) for pair in rnd]
    timing = m.get("timing", "auto")
    if timing not in TIMINGS:
        err.add(_line(bench, defaults, "timing"), f"{where}.timing", f"unknown timing {timing!r} (known: {', '.join(TIMINGS)})")
    env = m.get("env", {}) or {}
    if not isinstance(env, dict):
        err.add(_line(bench, defaults, "env"), f"{where}.env", "must be a mapping of variable -> value or list of values")
        env = {}
    env_lists = {}
    for k, v in env.items():
        if not isinstance(k, str) or not _ENV_NAME.match(k):
            err.add(env.line_of(k) if isinstance(env, LineDict) else bench.line, f"{where}.env",
                    f"{k!r} is not a valid environment variable name")
            continue
        vals = _as_list(v)
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
            bad = [x for x in _as_list(v) if x not in spec.choices]
            if bad:
                err.add(pline, f"{where}.params.{k}", f"{bad[0]!r} not in {list(spec.choices)}")
                continue
        param_lists[k] = _as_list(v)
    for k, spec in fam.params.items():
        param_lists.setdefault(k, [spec.default])
    for field_name, msg in fam.validate_bench(m):
        err.add(_line(bench, defaults, field_name.split(".")[0]), f"{where}.{field_name}", msg)
    if len(err.items) > n_err:
        return []
    varying = [k for k, v in env_lists.items() if len(v) > 1] or list(env_lists)
    env_variants = [dict(zip(env_lists, combo)) for combo in itertools.product(*env_lists.values())] or [{}]
    pkeys = list(param_lists)
    explicit = frozenset(params)   # written in the suite: a family's presets never override these
    cases = []
    for hosts, ranks, envv, op, backend, dtype, pcombo, size in itertools.product(
            host_groups, ranks_list, env_variants, ops, backends, dtypes,
            itertools.product(*param_lists.values()), sizes):
        rpn = int(ints["ranks_per_node"] or ranks)
        # placed: ranks_per_node ranks (default: `ranks`) on each named host of the group
        n_ranks = rpn * len(hosts) if hosts else ranks
        cases.append(fam.finalize_case(Case(
            suite=suite_name, bench=bname, family=fam.name, op=op, backend=backend,
            variant=_variant_label(envv, varying), env=tuple(sorted(envv.items())),
            dtype=dtype, size_bytes=size, params=tuple(zip(pkeys, pcombo)),
            warmup=int(ints["warmup"]) if ints["warmup"] is not None else default_iters(size, True),
            iters=int(ints["iters"]) if ints["iters"] is not None else default_iters(size, False),
            timing=timing, ranks=n_ranks, ranks_per_node=min(rpn, n_ranks),
            timeout_s=float(ints["timeout_s"]), hosts=hosts), explicit))
    return cases


def group_launches(cases: list[Case]) -> list[Launch]:
    """One launch per distinct (ranks, ranks_per_node, env, multicast opt-in, hosts), in first-seen order."""
    groups: dict[tuple, list[Case]] = {}
    for c in cases:
        key = (c.ranks, c.ranks_per_node, c.env, bool(c.param("allow_multicast")), c.hosts)
        groups.setdefault(key, []).append(c)
    out = []
    for i, ((ranks, rpn, env, _mc, hosts), cs) in enumerate(groups.items()):
        out.append(Launch(launch_id=i, ranks=ranks, ranks_per_node=rpn, env=env,
                          variant=cs[0].variant, case_ids=tuple(c.case_id for c in cs), hosts=hosts))
    return out
