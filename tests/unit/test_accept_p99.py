"""Acceptance rules on time_us_p99: a rule (and localize's pair_metric) may name it; a run with
the column is judged on it, a run from before it (or an nccl-tests table imported without -I)
fails the rule as an empty metric instead of refusing the rules file."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from commbench.analysis.accept.rules import load_rules
from commbench.analysis.accept.verdict import evaluate
from commbench.runfolder.reader import load_run

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _rules(tmp_path, body: str):
    p = tmp_path / "rules.yaml"
    p.write_text("rules:\n" + body)
    return load_rules(p)


def _with_p99(run, factor: float):
    return dataclasses.replace(run, results=run.results.assign(time_us_p99=run.results["time_us"] * factor))


def _rule_verdicts(run, ruleset, baseline=None):
    return [v for v in evaluate(run, ruleset, baseline)[0] if v.kind == "rule"]


def test_a_rule_on_p99_judges_the_tail(tmp_path):
    run = load_run(RUNS / "cpu-base")
    worst = float(run.results["time_us"].max())
    ruleset = _rules(tmp_path, f"  - {{name: tail, select: {{}}, metric: time_us_p99, aggregate: max, "
                               f"op: '<=', value: {2.5 * worst}}}\n")
    calm, = _rule_verdicts(_with_p99(run, 2.0), ruleset)
    tailed, = _rule_verdicts(_with_p99(run, 3.0), ruleset)
    assert calm.passed and not tailed.passed
    assert tailed.metric == "max(time_us_p99)" and tailed.unit == "us"


def test_a_run_without_p99_fails_the_rule_as_empty(tmp_path):
    run = load_run(RUNS / "cpu-base")
    assert "time_us_p99" not in run.results.columns
    ruleset = _rules(tmp_path, "  - {name: tail, select: {}, metric: time_us_p99, op: '<=', value: 1e9}\n")
    v, = _rule_verdicts(run, ruleset)
    assert not v.passed and "time_us_p99 is empty" in v.reason


def test_within_pct_of_on_p99_is_lower_is_better(tmp_path):
    run = load_run(RUNS / "cpu-base")
    ruleset = _rules(tmp_path, "  - {name: tail, select: {}, metric: time_us_p99, aggregate: median, "
                               "op: within_pct_of, pct: 10}\n")
    faster, = _rule_verdicts(_with_p99(run, 1.0), ruleset, _with_p99(run, 2.0))
    slower, = _rule_verdicts(_with_p99(run, 2.0), ruleset, _with_p99(run, 1.0))
    assert faster.passed and not slower.passed


def test_localize_may_compare_pairs_by_p99(tmp_path):
    ruleset = _rules(tmp_path, "  - {name: a, select: {}, metric: time_us, op: '<=', value: 1}\n"
                               "localize: {pair_metric: time_us_p99}\n")
    assert ruleset.localize.pair_metric == "time_us_p99"
