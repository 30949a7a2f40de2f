"""Load a suite: YAML (line-aware) -> validated benchmarks -> Cases -> launch groups."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..families.base import Case
from ..safety import KILL_SWITCHES, active_kill_switches
from .check_key import with_check
from .bench_keys import name_problem
from .expand import expand_bench
from .launches import Launch, group_launches, keep_only
from .limits import SuiteLimits
from .node_keys import NodeSpec, check_node_keys
from .overrides import ONLY_KEY, apply_overrides
from .schema import ALIASES, COMMON_KEYS, TOP_KEYS, SuiteErrors
from .settings import SuiteSettings, read_settings
from .shape import check_bench
from .yaml_lines import LineDict, LineList, load_yaml


@dataclass
class Suite:
    name: str
    path: Path
    cases: list[Case] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    share_gpu: bool = False   # `share_gpu: true`: ranks may share a GPU (suite/node_keys.py)
    node: NodeSpec = field(default_factory=NodeSpec)   # `node:`: what each node must have
    settings: SuiteSettings = field(default_factory=SuiteSettings)   # how it runs (suite/settings.py)


def load_suite(path: Path | str, *, gpu_count: int | None = None,
               overrides: dict[str, object] | None = None, limits: SuiteLimits | None = None) -> Suite:
    """Load, validate and expand a suite. Raises SuiteError listing every problem found.

    ``overrides`` (from `--set`) replace a key in every benchmark before validation;
    ``overrides["only"]`` (from `--only`) keeps just the benchmarks it names; ``limits`` caps the
    Cases and ranks (`--max-cases`, `--max-ranks`; defaults in suite/limits.py)."""
    path = Path(path)
    limits = SuiteLimits() if limits is None else SuiteLimits(limits.max_cases, limits.max_ranks)
    raw = load_yaml(path)
    err = SuiteErrors(path)
    if not isinstance(raw, LineDict):
        err.add(getattr(raw, "line", 1), "suite", "a suite is a mapping with 'name' and 'benchmarks'")
        err.raise_if_any()
    overrides = dict(overrides or {})
    only = overrides.pop(ONLY_KEY, None)
    if overrides and isinstance(raw.get("benchmarks"), list):
        apply_overrides(raw["benchmarks"], overrides)
    for key in raw:
        if key not in TOP_KEYS:
            err.add(raw.line_of(key), str(key), f"unknown key (expected one of: {', '.join(TOP_KEYS)})")
    settings = read_settings(raw, err)
    share_gpu, node = check_node_keys(raw, err)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        err.add(raw.line_of("name"), "name", "required: a non-empty string")
        name = path.stem
    elif name_problem(name):   # the suite's name names the run folder
        err.add(raw.line_of("name"), "name", name_problem(name))
    defaults = _defaults(raw, err)
    benches = raw.get("benchmarks")
    if not isinstance(benches, LineList) or not benches:
        err.add(raw.line_of("benchmarks"), "benchmarks", "required: a non-empty list of benchmarks")
        benches = LineList()
    if gpu_count is None:
        gpu_count = _gpu_count_hint()
    suite = Suite(name=name, path=path, settings=settings)
    suite.share_gpu, suite.node = share_gpu, node
    seen_names: set[str] = set()
    for i, bench in enumerate(benches):
        where = f"benchmarks[{i}]"
        if not isinstance(bench, LineDict):
            err.add(benches.line_of(i), where, "each benchmark is a mapping")
            continue
        if not check_bench(bench, defaults, where, err, limits, gpu_count):
            continue
        cases = expand_bench(bench, defaults, name, where, err, gpu_count, seen_names,
                             budget=limits, base_dir=path.parent)
        suite.cases.extend(with_check(cases, bench, defaults, where, err))   # `check:` (check_key.py)
    suite.cases = [label_held_switches(c) for c in suite.cases]
    _refuse_repeated_cases(suite.cases, benches, err)
    err.raise_if_any()
    suite.launches = group_launches(suite.cases)
    if only:
        keep_only(suite, list(only))
    return suite


def _defaults(raw: LineDict, err: SuiteErrors) -> LineDict:
    """The suite's `defaults:` mapping, its keys checked (an empty one when it is not a mapping)."""
    defaults = raw.get("defaults", LineDict())
    if not isinstance(defaults, LineDict):
        err.add(raw.line_of("defaults"), "defaults", "must be a mapping")
        return LineDict()
    for key in defaults:
        if ALIASES.get(key, key) not in COMMON_KEYS:
            err.add(defaults.line_of(key), f"defaults.{key}", "unknown key")
    return defaults


def label_held_switches(case: Case) -> Case:
    """A Case whose env switches multicast on without opting in (``allow_multicast``) runs with the
    switch held off (safety.launch_env): its variant label says what was held, not what was asked."""
    if case.param("allow_multicast"):
        return case
    variant = case.variant
    for key, value in case.env:
        if key in KILL_SWITCHES and not active_kill_switches({key: value}):
            held = f"{key}={KILL_SWITCHES[key]} (held; the suite's {value} needs allow_multicast)"
            variant = re.sub(rf"(?<![^,]){re.escape(key)}={re.escape(value)}(?=,|$)", lambda _m: held, variant)
    return case if variant == case.variant else dataclasses.replace(case, variant=variant)


def _refuse_repeated_cases(cases: list[Case], benches, err: SuiteErrors) -> None:
    """Two entries that mean the same Case (ranks `all` and the GPU count, 1KiB and 1024 bytes)
    would measure it twice under one id: an error on the benchmark."""
    seen: set[str] = set()
    lines = {b.get("name"): b.line for b in benches if isinstance(b, LineDict) and isinstance(b.get("name"), str)}
    for c in cases:
        if c.case_id in seen:
            err.add(lines.get(c.bench, 1), f"benchmark {c.bench}",
                    f"two list entries give the same Case ({c.op} {c.backend} {c.dtype} {c.size_bytes} B, "
                    f"{c.ranks} ranks, timing {c.timing}): a value is listed twice under two spellings")
            return
        seen.add(c.case_id)


def _gpu_count_hint() -> int:
    from ..sysinfo.gpus import gpu_count

    return gpu_count()
