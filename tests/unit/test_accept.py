"""accept: floors pass/fail, bad rows fail alone, JUnit parses, slow host named, bad rules exit 2."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.analysis.accept.junit import junit_xml
from commbench.analysis.accept.verdict import evaluate
from commbench.analysis.accept.localize import slow_from_samples
from commbench.placement.blame import blame_pairs
from commbench.sysinfo.hosts import round_robin_pairs
from commbench.analysis.accept.rules import RulesError, load_rules
from commbench.commands.accept_cmd import accept_cmd
from commbench.runfolder.reader import load_run

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "tests" / "fixtures" / "runs"
RING_RULE = """rules:
  - name: ring
    select: {op: all_reduce, backend: nccl, size_bytes: {min: 1GiB}}
    metric: busbw_gbps
    aggregate: min
    op: ">="
    value: 328
"""


def _rules(tmp_path, text, name="rules.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_floor_met_exits_0_and_missed_exits_1(tmp_path):
    rules = _rules(tmp_path, RING_RULE)
    runner = CliRunner()
    ok = runner.invoke(accept_cmd, [str(RUNS / "gpu8-healthy"), "--rules", str(rules),
                                    "--out", str(tmp_path / "a.html"), "--junit", str(tmp_path / "j.xml")])
    assert ok.exit_code == 0, ok.output
    root = ET.parse(tmp_path / "j.xml").getroot()
    assert root.get("failures") == "0" and len(root.iter("testcase").__next__().attrib) >= 2
    bad = runner.invoke(accept_cmd, [str(RUNS / "gpu8-slowhost"), "--rules", str(rules),
                                     "--out", str(tmp_path / "b.html"), "--junit", str(tmp_path / "k.xml")])
    assert bad.exit_code == 1, bad.output
    fails = list(ET.parse(tmp_path / "k.xml").getroot().iter("failure"))
    assert len(fails) == 1 and "misses >= 328" in fails[0].get("message")


def test_slow_host_is_named(tmp_path):
    rules = _rules(tmp_path, RING_RULE + "localize: true\n")
    res = CliRunner().invoke(accept_cmd, [str(RUNS / "gpu8-slowhost"), "--rules", str(rules),
                                          "--out", str(tmp_path / "a.html")])
    assert res.exit_code == 1
    assert "suspect host(s): node03" in res.output
    found = slow_from_samples(load_run(RUNS / "gpu8-slowhost").samples)
    flagged = found[found["flagged"]]
    assert list(flagged[flagged["level"] == "host"]["name"]) == ["node03"]
    ranks = flagged[flagged["level"] == "rank"]["name"]
    assert [n.split(" (")[0] for n in ranks] == ["rank 4", "rank 5"]
    healthy = slow_from_samples(load_run(RUNS / "gpu8-healthy").samples)
    assert not healthy["flagged"].any()


def test_bad_rows_fail_on_their_own(tmp_path):
    rules = load_rules(_rules(tmp_path, """rules:
  - {name: any, select: {backend: mpi}, metric: time_us, aggregate: max, op: "<=", value: 1e9}
"""))
    verdicts, _ = evaluate(load_run(RUNS / "cpu-damaged"), rules)
    failed = {v.check.split()[1] + ":" + v.measured for v in verdicts if not v.passed}
    assert failed == {"all_reduce:status=wrong wrong=17", "alltoall:status=failed wrong=0",
                      "all_gather:status=timeout wrong=0"}
    strict = load_rules(_rules(tmp_path, "rules:\n  require_all_ok: true\n  checks:\n"
                               "    - {name: any, metric: time_us, op: '<=', value: 1e9}\n", "s.yaml"))
    verdicts, _ = evaluate(load_run(RUNS / "cpu-damaged"), strict)
    assert sum(not v.passed for v in verdicts) == 4  # the skipped row too


def test_within_pct_of_baseline(tmp_path):
    rules = load_rules(_rules(tmp_path, """rules:
  - {name: t, select: {op: all_reduce, backend: mpi}, metric: time_us, aggregate: median, op: within_pct_of, pct: 10}
  - {name: bw, select: {op: all_reduce}, metric: busbw_gbps, aggregate: median, op: within_pct_of, pct: 10}
"""))
    base = load_run(RUNS / "cpu-base")
    assert all(v.passed for v in evaluate(load_run(RUNS / "cpu-rerun"), rules, base)[0])
    verdicts = evaluate(load_run(RUNS / "cpu-slow2x"), rules, base)[0]
    assert [v.passed for v in verdicts] == [False, False]
    # faster than the baseline is not a failure (one-sided by metric direction)
    assert all(v.passed for v in evaluate(base, rules, load_run(RUNS / "cpu-slow2x"))[0])


def test_shipped_acceptance_files_parse():
    for name in ("cpu", "h100", "h200"):
        rs = load_rules(ROOT / "suites" / f"acceptance-{name}.yaml")
        assert len(rs.rules) >= 5 and rs.localize is not None


def test_cpu_rules_pass_a_healthy_stored_run():
    """acceptance-cpu rules on a quickstart-shaped fixture (mpi + gloo, 2 ranks)."""
    rs = load_rules(ROOT / "suites" / "acceptance-cpu.yaml")
    verdicts, _ = evaluate(load_run(RUNS / "cpu-base"), rs)
    by = {v.check: v for v in verdicts}
    assert by["mpi-all_reduce-busbw-large"].passed and by["gloo-small-latency"].passed
    # the fixture has 7 sizes, not the suite's 10: the completeness rule must notice
    assert not by["mpi-every-op-measured"].passed


@pytest.mark.parametrize("body, line, field", [
    ("  - {name: a, metric: time_us, op: '=>', value: 1}\n", 2, "'op'"),
    ("  - name: a\n    metric: time_us\n    op: '<='\n    value: 1\n    select: {size_bytes: {min: 12QB}}\n", 6,
     "select.size_bytes"),
    ("  - name: a\n    metric: time_us\n    op: '<='\n    value: 1\n    colour: red\n", 6, "'colour'"),
    ("  - {name: a, metric: time_us, op: within_pct_of}\n", 2, "'pct'"),
    ("  - {name: a, metric: time_us, aggregate: p99, op: '<=', value: 1}\n", 2, "'aggregate'"),
])
def test_bad_rules_name_the_line(tmp_path, body, line, field):
    p = _rules(tmp_path, "rules:\n" + body)
    with pytest.raises(RulesError) as err:
        load_rules(p)
    assert f"{p}:{line}:" in str(err.value) and field in str(err.value)


def test_unknown_column_named_with_line(tmp_path):
    p = _rules(tmp_path, "rules:\n  - name: a\n    select:\n      opp: all_reduce\n"
                         "    metric: time_us\n    op: '<='\n    value: 1\n")
    res = CliRunner().invoke(accept_cmd, [str(RUNS / "cpu-base"), "--rules", str(p),
                                          "--out", str(tmp_path / "x.html")])
    assert isinstance(res.exception, RulesError)
    assert f"{p}:4:" in str(res.exception) and "select.opp" in str(res.exception)


def test_yaml_syntax_error_names_line(tmp_path):
    with pytest.raises(RulesError, match=r":3: YAML syntax error"):
        load_rules(_rules(tmp_path, "rules:\n  - name: a\n    metric: time_us: x\n"))


def test_round_robin_every_pair_once_rounds_disjoint():
    nodes = [f"n{i}" for i in range(7)]
    rounds = round_robin_pairs(nodes)
    pairs = [p for r in rounds for p in r]
    assert len(pairs) == len(set(pairs)) == 21
    for r in rounds:
        flat = [n for p in r for n in p]
        assert len(flat) == len(set(flat))


def test_blame_names_the_node_in_every_failing_pair():
    nodes = ["a", "b", "c", "d", "e"]
    results = {p: "c" not in p for r in round_robin_pairs(nodes) for p in r}
    assert blame_pairs(results)["node"] == "c"
    results = {p: p != ("a", "d") for r in round_robin_pairs(nodes) for p in r}
    verdict = blame_pairs(results)
    assert verdict["node"] is None and verdict["links"] == [("a", "d")]
    assert blame_pairs({p: True for p in results})["node"] is None
    from commbench.analysis.accept import localize

    assert not hasattr(localize, "blame_pairs")   # one home: imported from placement/blame.py, not re-exported


def test_junit_counts():
    from commbench.analysis.accept.outcome import Verdict

    xml = junit_xml([Verdict("r1", "rule", True, "1", ">= 0", "ok"),
                     Verdict("r2", "rule", False, "0", ">= 1", "too low")], "s")
    root = ET.fromstring(xml.split("?>", 1)[1])
    assert root.get("tests") == "2" and root.get("failures") == "1"


@pytest.mark.parametrize("where", ["missing/a.xml", "folder"])
def test_an_unwritable_junit_path_is_refused_before_the_suite_runs(tmp_path, monkeypatch, where):
    import commbench.launch.run as run

    started = []
    monkeypatch.setattr(run.Run, "execute", lambda *a, **k: started.append(a) or RUNS / "cpu-base")
    (tmp_path / "folder").mkdir()
    from commbench.cli import cli

    res = CliRunner().invoke(cli, ["accept", str(ROOT / "suites" / "acceptance-cpu.yaml"), "--junit",
                                   str(tmp_path / where), "--out", str(tmp_path / "a.html")])
    assert res.exit_code == 2, res.output
    assert "pick another --junit" in res.output and not started


def test_a_suite_that_cannot_run_here_exits_2_with_a_junit_error(tmp_path, monkeypatch):
    """One host for a pairs suite: bad input (exit 2), and CI still gets a JUnit file saying why."""
    from commbench.cli import cli

    monkeypatch.setenv("COMMBENCH_HOSTS", "only-host")
    junit = tmp_path / "accept.xml"
    res = CliRunner().invoke(cli, ["accept", str(ROOT / "suites" / "acceptance-multinode-cpu.yaml"),
                                   "--junit", str(junit), "--out", str(tmp_path / "a.html")])
    assert res.exit_code == 2, res.output
    assert "pairs needs at least 2 hosts" in res.output
    root = ET.parse(junit).getroot()
    assert root.get("errors") == "1" and root.get("tests") == "1" and root.get("failures") == "0"
    (error,) = list(root.iter("error"))
    assert "pairs needs at least 2 hosts" in error.text and error.get("message")
    # without --junit: the same exit status, and no file appears
    res = CliRunner().invoke(cli, ["accept", str(ROOT / "suites" / "acceptance-multinode-cpu.yaml")])
    assert res.exit_code == 2


def test_verdicts_name_their_metric_and_unit(tmp_path):
    from commbench.analysis.accept.rules import metric_unit
    from commbench.analysis.accept.verdict import verdict_table

    assert [metric_unit(m) for m in ("time_us_p90", "busbw_gbps", "size_bytes", "tokens_per_s", "wrong", "count")] \
        == ["us", "GB/s", "B", "tokens/s", "elements", ""]
    rules = load_rules(_rules(tmp_path, RING_RULE))
    verdicts, _ = evaluate(load_run(RUNS / "gpu8-slowhost"), rules)
    table = verdict_table(verdicts)
    ring = table[table["check"] == "ring"].iloc[0]
    assert ring["metric"] == "min(busbw_gbps)" and ring["unit"] == "GB/s" and ring["result"] == "fail"
    xml = junit_xml(verdicts, "s")
    assert "min(busbw_gbps): measured" in xml and "GB/s; expected &gt;= 328 GB/s" in xml
    res = CliRunner().invoke(accept_cmd, [str(RUNS / "gpu8-slowhost"), "--rules", str(_rules(tmp_path, RING_RULE)),
                                          "--out", str(tmp_path / "a.html")])
    header = res.output.splitlines()[0].split()
    assert header[:4] == ["check", "kind", "result", "metric"] and "unit" in header and "|" not in res.output
