"""Acceptance rules as data: parse and validate a rules YAML (never eval), naming file and line.

A rules file (or an acceptance suite with a top-level ``rules:`` list) holds:

    rules:
      - name: allreduce-ring-busbw          # unique
        select: {op: all_reduce, backend: nccl, size_bytes: {min: 1GiB}}
        metric: busbw_gbps                  # a numeric results column
        aggregate: min                      # min | median | max | mean
        op: ">="                            # >=, <=, within_pct_of
        value: 328                          # for >= and <=
        # pct: 5                            # for within_pct_of (the baseline run comes from --baseline)
        # drift_pct: 5                      # burn-in: fail a node whose metric sags more than 5% from
        # spread_pct: 10                    # its first to its last pass, or spreads more than 10%
        #                                   # across passes (op is then optional)
    localize: {min_excess_pct: 10}          # optional: name slow hosts/ranks from samples
    require_all_ok: true                    # optional: skipped rows fail too

In an acceptance suite the same goes under one key, which `commbench run` ignores:
``rules: {require_all_ok: true, localize: true, checks: [<rules as above>]}``.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commbench.analysis.bound_limits import BOUND_COLUMNS
from commbench.errors import CommbenchError, preview
from commbench.runfolder.schema import COLUMNS, FAMILY_COLUMNS, TAIL_COLUMNS
from commbench.suite.metric_columns import metric_refusal
from commbench.suite.yaml_lines import LineDict, load_yaml
from commbench.units import parse_size

OPERATORS = (">=", "<=", "within_pct_of")
AGGREGATES = ("min", "median", "max", "mean")
RULE_KEYS = {"name", "select", "metric", "aggregate", "op", "value", "pct", "min_rows", "two_sided",
             "drift_pct", "spread_pct"}
BURNIN_KEYS = ("drift_pct", "spread_pct")   # judged over the passes of a burn-in (accept/drift.py)
NESTED_KEYS = {"checks", "localize", "require_all_ok", "health"}
SIZE_COLUMNS = {"size_bytes"}
# Columns every run has and the family columns docs/results.md names; other columns are
# checked against the data.
KNOWN_COLUMNS = set(COLUMNS) | set(FAMILY_COLUMNS) | {"nccl_algo", "nccl_proto", "tokens_per_s", "transport",
                                                    "skew_us", "late_rank", "late_share", "late_gap_us", "kernel_us",
                                                    "enqueue_us", "nccl_channels", "nccl_proxy_steps", "profiled"}
KNOWN_COLUMNS |= set(BOUND_COLUMNS)   # computed from the rows and run.json when a rule names them
# Written since the column existed (time_us_p99: every row with per-iteration times); a run without
# it (an older folder, an nccl-tests table imported without -I tails) has it empty
KNOWN_COLUMNS |= set(TAIL_COLUMNS)
LOCALIZE_KEYS = {"min_excess_pct", "min_share", "z_threshold", "pair_metric", "pair_min_excess_us"}
PAIR_METRICS = ("time_us", "time_us_min", "time_us_p90", "time_us_p99", "time_us_max")


# The unit of a metric column, from a word of its name (docs/results.md): time_us_p90 is in us.
UNIT_WORDS = {"us": "us", "gbps": "GB/s", "bytes": "B", "pct": "%"}
RATE_UNITS = {"tokens_per_s": "tokens/s", "msgs_per_s": "msgs/s"}


def metric_unit(metric: str) -> str:
    """'us' for time_us, 'GB/s' for busbw_gbps, ...; '' for a column with no unit (a count)."""
    if metric == "wrong":
        return "elements"
    if metric in RATE_UNITS:
        return RATE_UNITS[metric]
    return next((UNIT_WORDS[w] for w in metric.split("_") if w in UNIT_WORDS), "")


class RulesError(CommbenchError):
    """A rules file is malformed: the message names the file, line and field."""


@dataclass(frozen=True)
class Selector:
    """column -> ('eq', v) | ('in', values) | ('range', lo, hi)."""

    terms: tuple[tuple[str, tuple], ...]


@dataclass(frozen=True)
class Rule:
    name: str
    select: Selector
    metric: str
    aggregate: str
    op: str
    value: float | None
    pct: float | None
    min_rows: int
    two_sided: bool
    source: str  # "file:line" for messages
    lines: dict = field(default_factory=dict, compare=False, hash=False)
    drift_pct: float | None = None    # burn-in: largest sag from the first to the last pass, percent
    spread_pct: float | None = None   # burn-in: largest (max - min) / median across passes, percent


@dataclass(frozen=True)
class LocalizeSettings:
    min_excess_pct: float = 10.0  # a host must be this much slower than the others' median
    min_share: float = 0.75  # ...in at least this share of the cases it appears in
    z_threshold: float = 3.5  # robust z (median/MAD) above which a host is an outlier
    pair_metric: str = "time_us"  # the time pairwise rounds are compared by (analysis/accept/pairs.py)
    pair_min_excess_us: float = 0.0  # ...and how much slower a pair's point must be, in us, to count


@dataclass
class RuleSet:
    rules: list[Rule]
    localize: LocalizeSettings | None
    require_all_ok: bool
    path: Path
    health: Any = None   # health_rules.HealthRules, or None for `health: false`


def _fail(path: Path, line: int, field_name: str, msg: str) -> RulesError:
    msg = msg if len(msg) <= 400 else msg[:400] + "..."   # bounded whatever the input
    return RulesError(f"{path}:{line}: field '{preview(field_name, 80, quote=False)}': {msg}")


def _size_or_number(column: str, value: Any, where) -> float:
    """A threshold or selector bound as a float; NaN and infinities are errors (a gate on them
    would always pass or always fail)."""
    if column in SIZE_COLUMNS:
        try:
            return float(parse_size(value))
        except ValueError as exc:
            raise where(str(exc)) from None
    number = None
    if isinstance(value, str):
        try:
            number = float(value)  # YAML 1.1 reads '1e9' as a string
        except ValueError:
            pass
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:   # an integer beyond any float
            number = math.inf
    if number is None:
        raise where(f"expected a number, got {preview(value)}")
    if not math.isfinite(number):
        raise where(f"expected a finite number, got {preview(value)}")
    return number


def _selector(raw: Any, path: Path, line: int) -> Selector:
    if raw is None:
        return Selector(())
    if not isinstance(raw, dict):
        raise _fail(path, line, "select", "expected a mapping of column: value | [values] | {min, max}")
    terms = []
    for col, val in raw.items():
        ln = raw.key_lines.get(col, line) if isinstance(raw, LineDict) else line

        def where(msg, col=col, ln=ln):
            return _fail(path, ln, f"select.{col}", msg)
        if not isinstance(col, str) or not col:
            raise where("column names are strings")
        if isinstance(val, dict):
            extra = set(val) - {"min", "max"}
            if extra or not val:
                raise where(f"a range takes 'min' and/or 'max', got {sorted(map(str, val))}")
            lo = _size_or_number(col, val["min"], where) if "min" in val else None
            hi = _size_or_number(col, val["max"], where) if "max" in val else None
            if lo is not None and hi is not None and lo > hi:
                raise where("min is above max")
            terms.append((col, ("range", lo, hi)))
        elif isinstance(val, list):
            if not val:
                raise where("an empty list selects nothing")
            vals = tuple(_size_or_number(col, v, where) if col in SIZE_COLUMNS else v for v in val)
            terms.append((col, ("in", vals)))
        else:
            terms.append((col, ("eq", _size_or_number(col, val, where) if col in SIZE_COLUMNS else val)))
    return Selector(tuple(terms))


def _rule(raw: Any, path: Path, names: set) -> Rule:
    line = getattr(raw, "line", 0)
    if not isinstance(raw, dict):
        raise _fail(path, line, "rules", "each rule is a mapping with name, select, metric, op")
    lines = getattr(raw, "key_lines", {})

    def at(key):
        return lines.get(key, line)
    unknown = sorted(set(map(str, raw)) - RULE_KEYS)
    if unknown:
        raise _fail(path, at(unknown[0]), unknown[0], f"unknown key; allowed: {sorted(RULE_KEYS)}")
    burnin = {}
    for key in BURNIN_KEYS:
        if key in raw:
            burnin[key] = _size_or_number(key, raw[key], lambda m, k=key: _fail(path, at(k), k, m))
            if burnin[key] < 0:
                raise _fail(path, at(key), key, "must be >= 0")
    for key in ("name", "metric") + (() if burnin else ("op",)):
        if key not in raw:
            raise _fail(path, line, key, "missing")
    name = raw["name"]
    if not isinstance(name, str) or not name or name in names:
        raise _fail(path, at("name"), "name", f"must be a unique non-empty string, got {preview(name)}")
    metric = raw["metric"]
    if not isinstance(metric, str) or not metric:
        raise _fail(path, at("metric"), "metric", "expected a column name such as busbw_gbps")
    if metric_refusal(metric):   # a text column (op, status, host ...) cannot be compared as a number
        raise _fail(path, at("metric"), "metric", metric_refusal(metric))
    op = raw.get("op", "")   # "" only with drift_pct / spread_pct: no check on the last pass's rows
    if op not in OPERATORS and not (burnin and op == ""):
        raise _fail(path, at("op"), "op", f"unknown operator {preview(op)}; use one of {list(OPERATORS)}")
    aggregate = raw.get("aggregate", "min")
    if aggregate not in AGGREGATES:
        raise _fail(path, at("aggregate"), "aggregate", f"use one of {list(AGGREGATES)}, got {preview(aggregate)}")
    value = pct = None
    if op in (">=", "<="):
        if "value" not in raw:
            raise _fail(path, line, "value", f"operator {op} needs a value")
        value = _size_or_number(metric, raw["value"], lambda m: _fail(path, at("value"), "value", m))
    elif op:   # within_pct_of
        if "pct" not in raw:
            raise _fail(path, line, "pct", "within_pct_of needs pct (allowed change in percent)")
        pct = _size_or_number("pct", raw["pct"], lambda m: _fail(path, at("pct"), "pct", m))
        if pct < 0:
            raise _fail(path, at("pct"), "pct", "must be >= 0")
    min_rows = raw.get("min_rows", 1)
    if isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 0:
        raise _fail(path, at("min_rows"), "min_rows", "expected an integer >= 0")
    two_sided = raw.get("two_sided", False)
    if not isinstance(two_sided, bool):
        raise _fail(path, at("two_sided"), "two_sided", "expected true or false")
    names.add(name)
    lines = dict(lines)
    if isinstance(raw.get("select"), LineDict):  # selector columns keep their own lines
        lines.update({f"select.{c}": ln for c, ln in raw["select"].key_lines.items()})
    return Rule(name=name, select=_selector(raw.get("select"), path, at("select")), metric=metric,
                aggregate=aggregate, op=op, value=value, pct=pct, min_rows=min_rows,
                two_sided=two_sided, source=f"{path}:{line}", lines=lines, **burnin)


def _localize(raw: Any, path: Path, line: int) -> LocalizeSettings | None:
    if raw is None or raw is False:
        return None
    if raw is True:
        return LocalizeSettings()
    if not isinstance(raw, dict) or set(map(str, raw)) - LOCALIZE_KEYS:
        raise _fail(path, line, "localize", f"expected true or a mapping with {sorted(LOCALIZE_KEYS)}")
    kwargs = {}
    for k, v in raw.items():
        def where(msg, k=k):
            return _fail(path, raw.key_lines.get(k, line), f"localize.{k}", msg)
        if k == "pair_metric":
            if v not in PAIR_METRICS:
                raise where(f"expected one of {', '.join(PAIR_METRICS)}, got {preview(v)}")
            kwargs[k] = v
            continue
        if isinstance(v, str):   # a quoted number is not a setting
            raise where(f"expected a finite number >= 0, got {preview(v)}")
        kwargs[k] = _size_or_number(str(k), v, where)
        if kwargs[k] < 0:
            raise where("expected a finite number >= 0")
    return LocalizeSettings(**kwargs)


def load_rules(path) -> RuleSet:
    """Parse a rules file (or an acceptance suite holding 'rules:'). Raises RulesError."""
    path = Path(path)
    doc = load_yaml(path, RulesError)
    if not isinstance(doc, dict) or "rules" not in doc:
        raise RulesError(f"{path}:1: field 'rules': missing; an acceptance file needs a 'rules:' list")
    settings = doc
    raw_rules = doc["rules"]
    if isinstance(raw_rules, dict):
        # Nested form, for acceptance suites: the suite loader ignores everything under 'rules'.
        unknown = sorted(set(map(str, raw_rules)) - NESTED_KEYS)
        if unknown:
            raise _fail(path, raw_rules.line_of(unknown[0]), f"rules.{unknown[0]}",
                        f"unknown key; allowed: {sorted(NESTED_KEYS)}")
        settings = raw_rules
        raw_rules = raw_rules.get("checks")
    if not isinstance(raw_rules, list) or not raw_rules:
        raise _fail(path, doc.line_of("rules"), "rules",
                    "expected a non-empty list of rules (or a mapping with a 'checks' list)")
    names: set = set()
    rules = [_rule(r, path, names) for r in raw_rules]
    require = settings.get("require_all_ok", False)
    if not isinstance(require, bool):
        raise _fail(path, settings.line_of("require_all_ok"), "require_all_ok", "expected true or false")
    from .health_rules import parse_health   # the `health:` part (docs/accept.md, "Health")

    return RuleSet(rules=rules, localize=_localize(settings.get("localize"), path,
                                                   settings.line_of("localize")),
                   require_all_ok=require, path=path, health=parse_health(settings, path))


def check_columns(ruleset: RuleSet, columns) -> None:
    """Every selector column and metric must exist in the data (or be a contract column)."""
    have = set(columns) | KNOWN_COLUMNS
    for rule in ruleset.rules:
        for col, _term in rule.select.terms:
            if col not in have:
                sel_line = rule.lines.get(f"select.{col}", rule.source.rsplit(":", 1)[1])
                raise RulesError(f"{ruleset.path}:{sel_line}: field 'select.{col}': unknown column "
                                 f"in rule '{rule.name}'; results have: {sorted(set(columns))}")
        if rule.metric not in have:
            raise RulesError(f"{ruleset.path}:{rule.lines.get('metric')}: field 'metric': unknown "
                             f"column {rule.metric!r} in rule '{rule.name}'")


def with_derived_columns(run, ruleset: RuleSet):
    """The run (a runfolder.reader.Run, or None) with the columns its rules name that are computed
    rather than stored: the bounds (bound_gbps, pct_of_bound, ...; analysis/bounds.py); and a tail
    column the run's rows predate, or a family column its families did not write (tokens_per_s,
    bitwise_mismatch), empty (a rule on it then fails as an empty metric)."""
    named = {r.metric for r in ruleset.rules} | {col for r in ruleset.rules for col, _ in r.select.terms}
    if run is None:
        return run
    results = run.results
    missing = [c for c in (*TAIL_COLUMNS, *FAMILY_COLUMNS) if c in named and c not in results.columns]
    if missing:
        results = results.assign(**{c: math.nan for c in missing})
    if named & set(BOUND_COLUMNS):
        from commbench.analysis.bounds import with_bounds

        results = with_bounds(results, run.meta)
    return run if results is run.results else dataclasses.replace(run, results=results)
