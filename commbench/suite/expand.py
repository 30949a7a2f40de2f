"""Sweep expansion: one benchmark of a suite (merged with its defaults) -> validated Cases.

Lists become cross products (host groups x ranks x env variants x ops x backends x dtypes x
timings x params x sizes). Each key is read and checked by suite/bench_keys.py, the sizes by
suite/sizes.py and the placement keys by suite/placement_keys.py; this module crosses them."""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from ..families.base import Case, Family
from ..units import format_size
from . import bench_keys as keys
from . import placement_keys as placement
from .bench_keys import BenchKeys
from .limits import SuiteLimits
from .schema import LARGE_BYTES, SuiteErrors
from .sizes import expand_sizes
from .yaml_lines import LineDict

__all__ = ["default_iters", "expand_bench", "expand_sizes"]


def default_iters(size_bytes: int, warmup: bool) -> int:
    """Defaults that keep large messages from dominating the wall time."""
    base, floor = (5, 2) if warmup else (20, 5)
    if size_bytes <= LARGE_BYTES:
        return base
    return max(floor, int(base * LARGE_BYTES / size_bytes))


def _field_value(case: Case, field_name: str):
    """The value a Case took for a suite field (as `Family.impossible` names fields)."""
    if field_name.startswith("params."):
        return case.param(field_name[7:])
    attr = {"ops": "op", "backends": "backend", "dtypes": "dtype", "sizes": "size_bytes"}.get(field_name, field_name)
    return getattr(case, attr)


def _reject_values_that_never_run(b: BenchKeys, fam: Family, cases: list[Case]) -> None:
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


@dataclass
class _Axes:
    """Every key's values of one benchmark, read and checked: what its Cases cross."""
    host_groups: list
    ranks: list
    ops: list
    backends: list
    dtypes: list
    timings: list
    env: dict
    params: dict
    sizes: list
    counts: dict
    search: tuple
    profile: str

    def lengths(self) -> list[int]:
        return [len(a) for a in (self.host_groups, self.ranks, self.ops, self.backends, self.dtypes,
                                 self.timings, *self.env.values(), *self.params.values(), self.sizes)]


def _read_axes(b: BenchKeys, fam: Family, gpu_count: int, budget: SuiteLimits, base_dir: Path | None) -> _Axes:
    ops = keys.choose(b, fam, "ops", fam.ops, list(fam.ops))
    backends = keys.choose(b, fam, "backends", fam.backends, list(fam.backends[:1]))
    dtypes = keys.choose(b, fam, "dtypes", fam.dtypes, [fam.default_dtype])
    sizes = expand_sizes(b.get("sizes", "1MiB"), b.err, b.line("sizes"), f"{b.where}.sizes", budget)
    counts = keys.counts(b)
    ranks_list = keys.ranks(b, gpu_count)
    host_groups = placement.host_groups(b)
    search = placement.search_settings(b)
    return _Axes(host_groups=host_groups, ranks=ranks_list, ops=ops, backends=backends, dtypes=dtypes,
                 timings=keys.timings(b), env=keys.env_lists(b),
                 params=keys.param_lists(b, fam, ranks_list, base_dir), sizes=sizes, counts=counts,
                 search=search, profile=keys.profile(b))


def expand_bench(bench: LineDict, defaults: LineDict, suite_name: str, where: str,
                 err: SuiteErrors, gpu_count: int, seen_names: set,
                 budget: SuiteLimits | None = None, base_dir: Path | None = None) -> list[Case]:
    """The validated Cases of one benchmark; problems go to ``err`` (then no Case is returned).
    ``base_dir``: the suite file's folder, where relative file parameters are taken from."""
    b = BenchKeys(bench, defaults, where, err)
    bname = keys.name(b, seen_names)
    b.where = f"{where} ({bname})"
    fam = keys.family(b)
    if fam is None:
        return []
    n_err = len(err.items)
    budget = budget or SuiteLimits()
    axes = _read_axes(b, fam, gpu_count, budget, base_dir)
    if len(err.items) > n_err:
        return []
    refusal = budget.take_cases(math.prod(axes.lengths()))   # counted before any Case is built
    if refusal:
        err.add(bench.line, b.where, refusal)
        return []
    params = b.get("params", {}) or {}
    explicit = frozenset(params if isinstance(params, dict) else ())   # written in the suite: presets keep them
    cases = _cases(axes, fam, suite_name, bname, explicit)
    _reject_values_that_never_run(b, fam, cases)
    return [] if len(err.items) > n_err else cases


def _cases(axes: _Axes, fam: Family, suite_name: str, bname: str, explicit: frozenset) -> list[Case]:
    """The cross product of ``axes`` as Cases (each finalized by its family)."""
    varying = [k for k, v in axes.env.items() if len(v) > 1] or list(axes.env)
    env_variants = [dict(zip(axes.env, combo)) for combo in itertools.product(*axes.env.values())] or [{}]
    pkeys = list(axes.params)
    counts, search = axes.counts, axes.search
    cases = []
    wave_of = placement.wave_of(axes.host_groups)
    for hosts, (ranks, per_node), envv, op, backend, dtype, timing, pcombo, size in itertools.product(
            axes.host_groups, axes.ranks, env_variants, axes.ops, axes.backends, axes.dtypes, axes.timings,
            itertools.product(*axes.params.values()), axes.sizes):
        rpn = int(counts["ranks_per_node"] or per_node or ranks)
        # placed: ranks_per_node ranks (default: `ranks`) on each named host of the group; a search's
        # template holds one node's ranks (its groups get rpn x their hosts: launch/search_run.py)
        n_ranks = rpn if search else rpn * len(hosts) if hosts else ranks
        case = fam.finalize_case(Case(
            suite=suite_name, bench=bname, family=fam.name, op=op, backend=backend,
            variant=keys.variant_label(envv, varying, axes.env), env=tuple(sorted(envv.items())),
            dtype=dtype, size_bytes=size, params=tuple(zip(pkeys, pcombo)),
            warmup=int(counts["warmup"]) if counts["warmup"] is not None else default_iters(size, True),
            iters=int(counts["iters"]) if counts["iters"] is not None else default_iters(size, False),
            timing=timing, ranks=n_ranks, ranks_per_node=min(rpn, n_ranks),
            timeout_s=float(counts["timeout_s"]), hosts=hosts,
            profile="" if axes.profile == "none" else axes.profile), explicit)
        if search:   # the launcher runs it wave by wave; its settings travel with the template
            case = dataclasses.replace(case, params=case.params + (("search", search),))
        elif hosts:   # the `wave` column: launches of one wave run at the same time (launch/waves.py)
            case = dataclasses.replace(case, params=case.params + (("wave", wave_of[hosts]),))
        cases.append(case)
    return cases
