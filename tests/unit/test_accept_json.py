"""accept's verdicts for machines (analysis/accept/verdict_json.py, `accept --json FILE`): strict
JSON, every check with its verdict, reason and numbers, the nodes and links it names, the counts
and the exit status, as docs/accept.md's schema says."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pandas as pd

from commbench.analysis.accept.rules import load_rules
from commbench.analysis.accept.verdict import evaluate
from commbench.analysis.accept.verdict_json import SCHEMA, error_json, verdict_json
from commbench.runfolder.reader import Run, load_run

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "tests" / "fixtures" / "runs"
RULES = """rules:
  localize: true
  checks:
    - {name: ring, select: {op: all_reduce, backend: nccl, size_bytes: {min: 1GiB}}, metric: busbw_gbps,
       aggregate: min, op: ">=", value: 328}
    - {name: small, select: {size_bytes: {max: 64MiB}}, metric: time_us, aggregate: median, op: "<=", value: 1e6}
"""
TOP_KEYS = {"schema", "verdict", "exit_status", "run", "rules_file", "baseline", "machine_busy",
            "warnings", "counts", "checks", "nodes", "links", "gpus", "ranks", "networks", "localization"}
CHECK_KEYS = {"check", "kind", "result", "passed", "metric", "unit", "measured", "expected", "reason", "level",
              "names", "numbers"}


def _strict(data: dict) -> dict:
    """What a reader gets: the dict through strict JSON (no NaN) and back."""
    return json.loads(json.dumps(data, allow_nan=False))


def _judged(tmp_path, folder: Path, text: str = RULES):
    (tmp_path / "rules.yaml").write_text(text)
    ruleset = load_rules(tmp_path / "rules.yaml")
    run = load_run(folder)
    verdicts, findings = evaluate(run, ruleset)
    return run, ruleset, verdicts, findings


def test_a_slow_host_run_as_json(tmp_path):
    run, ruleset, verdicts, findings = _judged(tmp_path, RUNS / "gpu8-slowhost")
    data = _strict(verdict_json(run, ruleset, verdicts, findings, [], 1))
    assert set(data) == TOP_KEYS and data["schema"] == SCHEMA == "commbench.accept/1"
    assert data["verdict"] == "fail" and data["exit_status"] == 1
    assert all(set(c) == CHECK_KEYS for c in data["checks"])
    ring = next(c for c in data["checks"] if c["check"] == "ring")
    assert ring["result"] == "fail" and ring["metric"] == "min(busbw_gbps)" and ring["unit"] == "GB/s"
    assert ring["numbers"]["threshold"] == 328 and ring["numbers"]["op"] == ">="
    assert ring["numbers"]["value"] < 328 and ring["numbers"]["rows_ok"] == ring["numbers"]["rows_selected"] > 0
    assert f"{ring['numbers']['value']:.4g}" == ring["measured"]          # the same number, unrounded
    small = next(c for c in data["checks"] if c["check"] == "small")
    assert small["result"] == "pass" and small["numbers"]["value"] <= 1e6
    slow = next(c for c in data["checks"] if c["check"] == "slow host node03")
    assert slow["level"] == "node" and slow["names"] == ["node03"] and slow["numbers"]["median_excess_pct"] > 10
    nodes = {n["name"]: n for n in data["nodes"]}
    assert set(nodes) == {"node01", "node02", "node03", "node04"}
    assert nodes["node03"]["result"] == "fail" and "slow host node03" in nodes["node03"]["checks"]
    assert all(n["result"] == "pass" and n["checks"] == [] for name, n in nodes.items() if name != "node03")
    assert sorted(r["name"] for r in data["ranks"]) == ["4", "5"]
    counts = data["counts"]
    assert counts["checks"] == len(data["checks"]) == counts["passed"] + counts["failed"]
    assert counts["failed"] == sum(c["result"] == "fail" for c in data["checks"])
    assert sum(k["checks"] for k in counts["by_kind"].values()) == counts["checks"]
    assert counts["nodes"] == 4 and counts["nodes_failed"] == 1 and counts["ranks_failed"] == 2
    assert {"level", "name", "flagged"} <= set(data["localization"][0])


def test_a_healthy_run_passes_with_exit_0(tmp_path):
    run, ruleset, verdicts, findings = _judged(tmp_path, RUNS / "gpu8-healthy",
                                               RULES.replace("value: 328", "value: 1"))
    data = _strict(verdict_json(run, ruleset, verdicts, findings, []))
    assert data["verdict"] == "pass" and data["exit_status"] == 0 and data["counts"]["failed"] == 0
    assert all(n["result"] == "pass" for n in data["nodes"]) and data["links"] == [] and data["ranks"] == []


def _pair_rows(slow_pair: tuple[str, str] | None, slow_node: str | None) -> pd.DataFrame:
    nodes = ["n-1", "n-2", "n-3", "n-4", "n-5"]
    rows = []
    for a, b in itertools.combinations(nodes, 2):
        for size in (8, 1 << 20):
            t = 10.0 + size / 1e5
            t *= 8.0 if (a, b) == slow_pair or slow_node in (a, b) else 1.0
            rows.append({"bench": "bw", "op": "all_reduce", "backend": "mpi", "variant": "default",
                         "dtype": "float32", "size_bytes": size, "time_us": t, "time_us_min": t, "status": "ok",
                         "wrong": 0, "hosts": f"{a},{b}", "case_id": f"{a}{b}{size}"})
    return pd.DataFrame(rows)


def _pairs_json(tmp_path, df: pd.DataFrame) -> dict:
    (tmp_path / "r.yaml").write_text('localize: {min_excess_pct: 200, min_share: 0.75, pair_metric: time_us_min}\n'
                                     'rules: [{name: none, select: {op: gather}, metric: time_us, op: "<=", '
                                     'value: 1, min_rows: 0}]\n')
    ruleset = load_rules(tmp_path / "r.yaml")
    run = Run(path=tmp_path / "run", results=df, samples=pd.DataFrame(), meta={})
    verdicts, findings = evaluate(run, ruleset)
    return _strict(verdict_json(run, ruleset, verdicts, findings))


def test_a_bad_node_of_the_pairs_and_a_bad_link(tmp_path):
    node = _pairs_json(tmp_path, _pair_rows(None, "n-3"))
    assert [n["name"] for n in node["nodes"] if n["result"] == "fail"] == ["n-3"]
    assert node["counts"]["nodes"] == 5 and node["links"] == []
    bad = next(c for c in node["checks"] if c["check"] == "bad node n-3")
    assert bad["numbers"] == {"failing_pairs": 4, "pairs": 10}
    link = _pairs_json(tmp_path, _pair_rows(("n-2", "n-5"), None))
    assert [x["name"] for x in link["links"]] == ["n-2,n-5"] and link["counts"]["links_failed"] == 1
    assert all(n["result"] == "pass" for n in link["nodes"])   # a bad link fails no node
    assert link["exit_status"] == 1 and link["verdict"] == "fail"


def test_a_missing_number_is_null_never_nan(tmp_path):
    run, ruleset, verdicts, findings = _judged(tmp_path, RUNS / "gpu8-slowhost")
    verdicts[0].numbers["value"] = float("nan")
    data = _strict(verdict_json(run, ruleset, verdicts, findings))
    assert data["checks"][0]["numbers"]["value"] is None


def test_an_acceptance_that_could_not_be_judged():
    data = _strict(error_json("some/folder", "not a run folder", 2))
    assert data["verdict"] == "error" and data["exit_status"] == 2 and data["error"] == "not a run folder"


def test_accept_json_option_writes_what_the_exit_status_says(tmp_path):
    from click.testing import CliRunner

    from commbench.commands.accept_cmd import accept_cmd

    (tmp_path / "rules.yaml").write_text(RULES)
    res = CliRunner().invoke(accept_cmd, [str(RUNS / "gpu8-slowhost"), "--rules", str(tmp_path / "rules.yaml"),
                                          "--out", str(tmp_path / "a.html"), "--json", str(tmp_path / "a.json")])
    assert res.exit_code == 1, res.output
    data = json.loads((tmp_path / "a.json").read_text())
    assert data["exit_status"] == 1 and data["verdict"] == "fail" and data["rules_file"].endswith("rules.yaml")
    assert [n["name"] for n in data["nodes"] if n["result"] == "fail"] == ["node03"]
    (tmp_path / "bad.yaml").write_text("rules: [{name: x}]\n")
    from commbench.cli import cli

    res = CliRunner().invoke(cli, ["accept", str(RUNS / "gpu8-slowhost"), "--rules", str(tmp_path / "bad.yaml"),
                                   "--json", str(tmp_path / "b.json")])
    assert res.exit_code == 2, res.output
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["verdict"] == "error" and data["exit_status"] == 2 and "bad.yaml" in data["error"]


def test_accept_json_to_standard_output_keeps_it_pure_json(tmp_path):
    from click.testing import CliRunner

    from commbench.cli import cli

    (tmp_path / "rules.yaml").write_text(RULES)
    res = CliRunner().invoke(cli, ["accept", str(RUNS / "gpu8-slowhost"), "--rules", str(tmp_path / "rules.yaml"),
                                   "--out", str(tmp_path / "a.html"), "--json", "-"])
    assert res.exit_code == 1, res.stderr
    data = json.loads(res.stdout)
    assert data["exit_status"] == 1 and "FAIL:" in res.stderr and "ring" in res.stderr
