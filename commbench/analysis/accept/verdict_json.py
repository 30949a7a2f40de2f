"""Acceptance verdicts for machines (`accept --json FILE`): one JSON object per acceptance, schema
in docs/accept.md ("Verdicts as JSON"). Built by pure functions from what `accept` already has:
the verdicts, the localisation table, the warnings and the exit status. Strict JSON: a number that
is not finite is null."""
from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from .outcome import Verdict

SCHEMA = "commbench.accept/1"   # as compare --json's "commbench.compare/1": a later version adds keys only


def verdict_json(run, ruleset, verdicts: list[Verdict], findings: pd.DataFrame | None = None,
                 warnings: list[str] = (), exit_status: int | None = None, baseline=None) -> dict:
    """The acceptance of ``run`` as a JSON-ready dict: the verdict, exit status, counts, every check
    (its verdict, reason and numbers), the nodes (every host the run names, failing or not), the
    failing links, GPUs and ranks, and the localisation table."""
    failed = sum(not v.passed for v in verdicts)
    status = (1 if failed else 0) if exit_status is None else int(exit_status)
    named = _named(verdicts)
    nodes = _nodes(run, named.get("node", {}))
    return _plain({
        "schema": SCHEMA,
        "verdict": "fail" if failed else "pass", "exit_status": status,
        "run": {"path": str(run.path), "label": run.label, "suite": (run.meta or {}).get("suite"),
                "started_utc": (run.meta or {}).get("started_utc")},
        "rules_file": str(ruleset.path) if ruleset is not None else None,
        "baseline": str(baseline.path) if baseline is not None else None,
        "machine_busy": bool(warnings), "warnings": list(warnings),
        "counts": _counts(verdicts, nodes, named),
        "checks": [check_json(v) for v in verdicts],
        "nodes": nodes,
        **{level + "s": [{"name": name, "result": "fail", "checks": checks}
                         for name, checks in named.get(level, {}).items()]
           for level in ("link", "gpu", "rank", "network")},
        "localization": _records(findings),
    })


def error_json(target, message: str, exit_status: int = 2) -> dict:
    """The acceptance that could not be judged (bad rules, not a run folder: verdict "error", exit 2)
    or that failed before anything ran (a node not of the suite's shape: "fail", exit 1)."""
    return {"schema": SCHEMA, "verdict": "error" if int(exit_status) == 2 else "fail", "exit_status": int(exit_status),
            "run": {"path": str(target)}, "error": str(message)}


def check_json(v: Verdict) -> dict:
    return {"check": v.check, "kind": v.kind, "result": "pass" if v.passed else "fail", "passed": bool(v.passed),
            "metric": v.metric, "unit": v.unit, "measured": v.measured, "expected": v.expected, "reason": v.reason,
            "level": v.level or None, "names": list(v.names), "numbers": dict(v.numbers)}


def _named(verdicts: list[Verdict]) -> dict[str, dict[str, list[str]]]:
    """level -> name -> the failing checks that name it (in verdict order)."""
    out: dict[str, dict[str, list[str]]] = {}
    for v in verdicts:
        if v.passed or not v.level:
            continue
        for name in v.names:
            out.setdefault(v.level, {}).setdefault(str(name), []).append(v.check)
    return out


def _nodes(run, failing: dict[str, list[str]]) -> list[dict]:
    """Every host the run names (run.json's hosts, the rows' host and hosts columns) and every
    host a failing check names: result "fail" with those checks, else "pass" (no check named it)."""
    hosts = [str(h) for h in (run.meta or {}).get("hosts") or [] if isinstance(h, str)]
    df = run.results
    if "host" in df.columns:
        hosts += [str(h) for h in df["host"].dropna().unique() if str(h)]
    if "hosts" in df.columns:
        hosts += [h for cell in df["hosts"].dropna().unique() for h in str(cell).split(",") if h]
    hosts += list(failing)
    return [{"name": h, "result": "fail" if h in failing else "pass", "checks": failing.get(h, [])}
            for h in sorted(dict.fromkeys(hosts))]


def _counts(verdicts: list[Verdict], nodes: list[dict], named: dict) -> dict:
    by_kind: dict[str, dict[str, int]] = {}
    for v in verdicts:
        k = by_kind.setdefault(v.kind, {"checks": 0, "passed": 0, "failed": 0})
        k["checks"] += 1
        k["passed" if v.passed else "failed"] += 1
    failed = sum(not v.passed for v in verdicts)
    node_results = Counter(n["result"] for n in nodes)
    return {"checks": len(verdicts), "passed": len(verdicts) - failed, "failed": failed, "by_kind": by_kind,
            "nodes": len(nodes), "nodes_failed": node_results["fail"],
            **{f"{level}s_failed": len(named.get(level, {})) for level in ("link", "gpu", "rank", "network")}}


def _records(findings: pd.DataFrame | None) -> list[dict]:
    if findings is None or findings.empty:
        return []
    return findings.to_dict("records")


def _plain(value):
    """JSON-ready: numpy scalars as Python numbers, NaN and infinities as None, tuples as lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):   # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is pd.NA or value is pd.NaT:
        return None
    return value
