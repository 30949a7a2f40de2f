"""accept's comparison gates never pass on missing data (analysis/accept): within_pct_of with no
comparable points fails and says why and compares only the points both runs have, a zero baseline
is no comparison, and a rule key given twice is an error."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from commbench.analysis.accept.rules import load_rules
from commbench.analysis.accept.verdict import evaluate
from commbench.cli import cli
from commbench.runfolder.reader import load_run

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "tests" / "fixtures" / "runs" / "cpu-base"


def damaged(tmp_path, name: str, **files) -> Path:
    run = tmp_path / name
    shutil.copytree(BASE, run)
    for fname, data in files.items():
        (run / fname.replace("_", ".", 1)).write_bytes(data if isinstance(data, bytes) else data.encode())
    return run


def test_within_pct_of_without_comparable_points_fails_and_says_why(tmp_path):
    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - {name: t, select: {op: all_reduce}, metric: time_us, op: within_pct_of, "
                     "pct: 10}\n")
    df = pd.read_csv(BASE / "results.csv", keep_default_na=False)
    df["size_bytes"] = df["size_bytes"] * 3           # the same ops, at sizes the baseline never ran
    other = damaged(tmp_path, "other", results_csv=df.to_csv(index=False), samples_csv="")
    (other / "samples.csv").unlink()
    verdicts, _ = evaluate(load_run(other), load_rules(rules), load_run(BASE))
    v = verdicts[0]
    assert not v.passed and "no comparable points" in v.reason
    result = CliRunner().invoke(cli, ["accept", str(other), "--rules", str(rules), "--baseline", str(BASE),
                                      "--out", str(tmp_path / "a.html")])
    assert result.exit_code == 1 and "FAIL" in result.output


def test_within_pct_of_compares_only_shared_points(tmp_path):
    """The run measured one extra, slow size: the baseline never ran it, so it cannot fail the gate."""
    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - {name: t, select: {op: all_reduce, backend: mpi}, metric: time_us, "
                     "aggregate: max, op: within_pct_of, pct: 10}\n")
    df = pd.read_csv(BASE / "results.csv", keep_default_na=False)
    extra = df[(df["op"] == "all_reduce") & (df["backend"] == "mpi")].iloc[[0]].copy()
    extra["size_bytes"], extra["time_us"], extra["case_id"] = 1 << 30, 1e9, "extra"
    more = damaged(tmp_path, "more", results_csv=pd.concat([df, extra]).to_csv(index=False))
    verdicts, _ = evaluate(load_run(more), load_rules(rules), load_run(BASE))
    assert verdicts[0].passed, verdicts[0].reason


def test_a_zero_baseline_is_not_a_comparison(tmp_path):
    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - {name: bw, select: {op: all_reduce}, metric: busbw_gbps, op: within_pct_of, "
                     "pct: 10}\n")
    df = pd.read_csv(BASE / "results.csv", keep_default_na=False)
    df["busbw_gbps"] = 0.0
    zero = damaged(tmp_path, "zero", results_csv=df.to_csv(index=False))
    verdicts, _ = evaluate(load_run(BASE), load_rules(rules), load_run(zero))
    assert not verdicts[0].passed and "no comparison possible" in verdicts[0].reason


def test_duplicate_rule_keys_are_errors_not_the_last_value(tmp_path):
    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - name: r\n    metric: busbw_gbps\n    op: '>='\n    value: 1000000\n"
                     "    value: 0\n")
    result = CliRunner().invoke(cli, ["accept", str(BASE), "--rules", str(rules)])
    assert result.exit_code == 2 and "r.yaml:6:" in result.output and "duplicate key" in result.output
