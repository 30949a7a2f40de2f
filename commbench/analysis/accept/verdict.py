"""Acceptance: evaluate rules on a run -> verdicts (pass/fail with reasons), JUnit XML, report."""
from __future__ import annotations

import pandas as pd

from .drift import burnin_checks
from .health_rules import health_verdicts
from .node_check import node_verdicts, placement_verdicts, row_verdicts, with_pair_findings
from .outcome import Verdict
from .rule_check import evaluate_rule, select
from .rules import RuleSet, check_columns, with_derived_columns
from .search_check import merge_health, search_checks
from commbench.runfolder.reader import Run


def evaluate(run: Run, ruleset: RuleSet, baseline: Run | None = None) -> tuple[list[Verdict], pd.DataFrame]:
    """All verdicts for a run (rules, bad rows, slow nodes) and the localisation table."""
    run, baseline = with_derived_columns(run, ruleset), with_derived_columns(baseline, ruleset)
    check_columns(ruleset, run.results.columns)
    verdicts = [evaluate_rule(rule, run, baseline) for rule in ruleset.rules if rule.op]
    verdicts += [Verdict(kind="rule", **c) for c in burnin_checks(run, ruleset.rules, select)]
    verdicts += row_verdicts(run, ruleset.require_all_ok)
    nodes, findings = node_verdicts(run, ruleset)
    nodes += placement_verdicts(run, ruleset, baseline)
    nodes += merge_health(search_checks(run.meta, str(run.path / "run.json")),   # placement: search
                          health_verdicts(run, ruleset.health))   # GPU health, whatever the timings (health_rules.py)
    findings = with_pair_findings(findings, run, ruleset)
    suspects = ", ".join(v.check.split(" ", 2)[2] for v in nodes if v.check.startswith("slow host"))
    if suspects:
        for v in verdicts:
            if v.kind == "rule" and not v.passed:
                v.reason += f"; suspect host(s): {suspects}"
    return verdicts + nodes, findings


def verdict_table(verdicts: list[Verdict]) -> pd.DataFrame:
    return pd.DataFrame([{"check": v.check, "kind": v.kind, "result": "pass" if v.passed else "fail",
                          "metric": v.metric, "measured": v.measured, "expected": v.expected, "unit": v.unit,
                          "reason": v.reason}
                         for v in verdicts])


def machine_warnings(run: Run, baseline: Run | None = None) -> list[str]:
    """One line per run (and baseline) whose machine was busy (run.json's machine_load): a verdict
    on such a run holds, but its times may be slow or noisy, and a reader must be told."""
    from commbench.sysinfo.load import describe

    named = [("run " + run.label, run)] + ([("baseline " + baseline.label, baseline)] if baseline else [])
    return [w for w in (describe(label, r.meta) for label, r in named) if w]


def accept_document(run: Run, ruleset: RuleSet, verdicts: list[Verdict], findings: pd.DataFrame,
                    warnings: list[str] = ()):
    from commbench.analysis.report.document import Document

    failed = sum(not v.passed for v in verdicts)
    doc = Document(f"commbench accept: {run.label}: {'FAIL' if failed else 'PASS'}"
                   + (" (busy machine)" if warnings else ""))
    sec = doc.section("Verdict")
    sec.text(f"{len(verdicts)} checks, {failed} failed. Rules from {ruleset.path}. Rows with "
             "wrong > 0, failed or timeout fail on their own"
             + (", and so do skipped rows (require_all_ok)." if ruleset.require_all_ok else "."))
    for w in warnings:
        sec.text(f"Warning: {w}.")
    sec.table(verdict_table(verdicts))
    if ruleset.localize is not None:
        sec = doc.section("Slow nodes and GPUs")
        sec.text(f"Per Case, each host's (and rank's) median time against the median of the "
                 f"others; flagged when at least {ruleset.localize.min_excess_pct:g}% slower in "
                 f"at least {ruleset.localize.min_share:.0%} of its Cases. Robust z uses the "
                 "median and MAD across hosts (needs 3 or more).")
        shown = _findings_shown(findings)
        if len(shown) < len(findings):
            sec.text(f"{len(findings):,} lines: the flagged ones and the {FINDINGS_UNFLAGGED} slowest of the others "
                     "are shown (accept --json holds them all).")
        sec.table(shown, "no per-rank samples to compare")
    return doc


FINDINGS_UNFLAGGED = 20   # a fleet's table has a line per host and rank: the others shown, at most


def _findings_shown(findings: pd.DataFrame, most: int = 200) -> pd.DataFrame:
    """All of a short localisation table; of a long one (> ``most`` lines) the flagged lines and the
    FINDINGS_UNFLAGGED slowest others."""
    if len(findings) <= most or "flagged" not in findings.columns:
        return findings
    excess = next((c for c in ("median_excess_pct", "worst_excess_pct") if c in findings.columns), None)
    rest = findings[~findings["flagged"].astype(bool)]
    rest = rest.sort_values(excess, ascending=False) if excess else rest
    return pd.concat([findings[findings["flagged"].astype(bool)], rest.head(FINDINGS_UNFLAGGED)])
