"""Burn-in (`run --duration`): passes in one run folder, rows stamped with their pass, drift and
spread per node in the report and in accept's rules, Ctrl-C keeping the passes measured."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.analysis import burnin
from commbench.analysis.accept.drift import burnin_checks
from commbench.analysis.accept.rule_check import select
from commbench.analysis.accept.rules import RulesError, load_rules
from commbench.analysis.accept.verdict import evaluate
from commbench.cli import cli
from commbench.launch.burnin import burnin_exit_status, last_pass, run_burnin, stamp_pass
from commbench.suite import load_suite
from commbench.runfolder import RunFolder
from commbench.runfolder.reader import Run
from commbench.units import parse_duration
from tests.conftest import needs_mpi

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text,seconds", [("8h", 28800), ("30m", 1800), ("90s", 90), ("90", 90),
                                          ("1.5h", 5400), (" 2d ", 172800), (45, 45)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "8 hours", "-1s", "0s", "1w", True, None, [1]])
def test_parse_duration_refuses(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_suite_duration_key(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE.replace("SPIN", "100").replace("name: burn\n", "name: burn\nduration: 30m\n"))
    assert load_suite(suite, gpu_count=0).settings.duration_s == 1800
    suite.write_text(SUITE.replace("SPIN", "100").replace("name: burn\n", "name: burn\nduration: soon\n"))
    with pytest.raises(Exception, match=r"s.yaml:2: duration: bad duration"):
        load_suite(suite, gpu_count=0)


def _rules(tmp_path, body: str):
    p = tmp_path / "rules.yaml"
    p.write_text("rules:\n" + textwrap.indent(textwrap.dedent(body), "  "))
    return load_rules(p)


def test_rule_fields_drift_and_spread(tmp_path):
    rs = _rules(tmp_path, "- {name: a, metric: time_us, drift_pct: 5, spread_pct: 10}\n")
    assert (rs.rules[0].drift_pct, rs.rules[0].spread_pct, rs.rules[0].op) == (5, 10, "")
    with pytest.raises(RulesError, match="drift_pct"):
        _rules(tmp_path, "- {name: a, metric: time_us, drift_pct: -1}\n")
    with pytest.raises(RulesError, match="'op': missing"):
        _rules(tmp_path, "- {name: a, metric: time_us}\n")


def _write_burnin(path: Path, times: dict[str, list[float]]) -> None:
    """A run folder's results.jsonl: per host, one row per pass with the given time_us."""
    path.mkdir()
    with open(path / "results.jsonl", "w") as fh:
        for host, per_pass in times.items():
            for p, t in enumerate(per_pass, 1):
                fh.write(json.dumps({"case_id": f"c-{host}", "op": "spin", "host": host, "status": "ok",
                                     "time_us": t, "pass": p, "pass_utc": f"2026-01-01T00:0{p}:00"}) + "\n")


def _run_of(path: Path) -> Run:
    rows = RunFolder(path).latest_rows()
    return Run(path=path, results=pd.DataFrame(rows), samples=pd.DataFrame(), meta={})


def test_drift_rule_names_the_sagging_node_and_pass(tmp_path):
    _write_burnin(tmp_path / "run", {"n1": [100, 101, 99, 100], "n2": [100, 104, 118, 131]})
    rs = _rules(tmp_path, "- {name: steady, select: {op: spin}, metric: time_us, aggregate: median, drift_pct: 10}\n")
    checks = burnin_checks(_run_of(tmp_path / "run"), rs.rules, select)
    assert [(c["check"], c["passed"]) for c in checks] == [("steady on n2", False),
                                                           ("burn-in: every pass's rows", True)]
    assert "node n2" in checks[0]["reason"] and "31.0%" in checks[0]["reason"]
    assert "worst pass 4" in checks[0]["reason"]
    verdicts, _ = evaluate(_run_of(tmp_path / "run"), rs)
    assert [v.passed for v in verdicts if v.kind == "rule"] == [False, True]


def test_spread_rule_fails_a_node_that_swings_and_passes_a_steady_one(tmp_path):
    _write_burnin(tmp_path / "run", {"n1": [100, 100, 101], "n2": [100, 160, 101]})
    rs = _rules(tmp_path, "- {name: s, metric: time_us, spread_pct: 20}\n")
    checks = burnin_checks(_run_of(tmp_path / "run"), rs.rules, select)
    assert [(c["check"], c["passed"]) for c in checks][0] == ("s on n2", False)
    assert "worst pass 2" in checks[0]["reason"]
    _write_burnin(tmp_path / "steady", {"n1": [100, 100, 101], "n2": [100, 102, 101]})
    checks = burnin_checks(_run_of(tmp_path / "steady"), rs.rules, select)
    assert [(c["check"], c["passed"]) for c in checks][0] == ("s", True)


def test_higher_is_better_metric_sags_when_it_falls(tmp_path):
    table = pd.DataFrame({1: [300.0], 2: [240.0]}, index=["n1"])
    (t,) = burnin.trends(table, "busbw_gbps")
    assert t.drift_pct == pytest.approx(20.0) and t.worst_pass == 2


def test_a_drift_rule_on_a_run_without_passes_fails_unless_optional(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.jsonl").write_text(json.dumps({"case_id": "c", "status": "ok", "time_us": 1}) + "\n")
    rs = _rules(tmp_path, "- {name: d, metric: time_us, drift_pct: 5}\n")
    (check,) = burnin_checks(_run_of(tmp_path / "run"), rs.rules, select)   # not a burn-in: no pass check
    assert not check["passed"] and "at least 2 passes" in check["reason"]
    rs = _rules(tmp_path, "- {name: d, metric: time_us, drift_pct: 5, min_rows: 0}\n")
    assert burnin_checks(_run_of(tmp_path / "run"), rs.rules, select)[0]["passed"]


def test_stamped_rows_are_an_ended_pass_and_keep_their_samples(tmp_path):
    folder = RunFolder(tmp_path / "run")
    folder.claim(resume=False)
    try:
        folder.append_samples([{"case_id": "a", "rank": 0, "host": "h", "gpu": "", "iteration": 0, "time_us": 1}])
        folder.append_row({"case_id": "a", "status": "ok", "time_us": 1.0})
        assert folder.done_case_ids() == {"a"}
        assert stamp_pass(folder, 1, "2026-01-01T00:00:00") == 1
        assert stamp_pass(folder, 2, "2026-01-01T00:01:00") == 0   # a stamped row keeps its pass
        assert folder.done_case_ids() == set()   # the next pass measures it again
        assert folder.keep_samples(set()) == 0   # ...and pass 1's samples stay
        assert last_pass(folder.path) == (1, False)
        folder.append_row({"case_id": "a", "status": "ok", "time_us": 2.0})
        assert folder.done_case_ids() == {"a"} and last_pass(folder.path) == (1, True)
        assert [r.get("pass") for r in folder.rows()] == [1, None]
    finally:
        folder.release()
    rows = burnin.pass_rows(tmp_path / "run")   # an unstamped row counts as the pass after
    assert list(rows["pass"]) == [1, 2]


SUITE = """\
name: burn
defaults: {ranks: 2, sizes: [8B, 4KiB], dtypes: [int32], warmup: 1, iters: 3, timeout_s: 60}
benchmarks:
  - {name: spin, family: harness, backends: [mpi], ops: [spin], params: {spin_ns_per_byte: SPIN}}
"""
RULES = """\
rules:
  - {name: spin-steady, select: {op: spin, size_bytes: 4KiB}, metric: time_us, aggregate: median,
     drift_pct: 25, spread_pct: 40}
"""


NAMED = SimpleNamespace(name="s")   # what a burn-in reads of its Suite: the name


def _passes(out: Path) -> list:
    return [r.get("pass") for r in RunFolder(out).rows()]


def test_passes_stop_at_the_first_boundary_after_the_duration(tmp_path):
    now = [0.0]
    calls = []

    def run_one(out, again, before_finish):
        calls.append(again)
        now[0] += 2.0   # a pass of 2 s
        return out

    out, passes = run_burnin(NAMED, tmp_path / "run", 5.0, resume=False, run_one=run_one,
                             clock=lambda: now[0])
    assert (out, passes, calls) == (tmp_path / "run", 3, [False, True, True])   # 2, 4, then 6 s >= 5 s


def test_a_burnin_folder_is_only_continued_with_resume(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.jsonl").write_text("")
    with pytest.raises(Exception, match="--resume"):
        run_burnin(NAMED, tmp_path / "run", 5.0, resume=False, run_one=None)


def test_burnin_and_repeat_without_out_pick_a_new_folder_unless_resumed(tmp_path, monkeypatch):
    from commbench.launch.repeat import run_repeats

    (tmp_path / "s.yaml").write_text(SUITE.replace("SPIN", "100"))
    suite = load_suite(tmp_path / "s.yaml", gpu_count=0)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception, match="--duration with --resume.*needs --out: the run folder"):
        run_burnin(suite, None, 5.0, resume=True, run_one=None)
    with pytest.raises(Exception, match="--repeat with --resume.*needs --out: the folder that holds"):
        run_repeats(suite, None, 2, resume=True, run_one=None)
    out, passes = run_burnin(suite, None, 0.0, resume=False, run_one=lambda *a: None)
    assert passes == 1 and out.parent == Path("results") and out.is_dir()
    done = run_repeats(suite, None, 2, resume=False, run_one=lambda f, again: f)
    assert [p.name for p in done] == ["repeat-1", "repeat-2"] and done[0].parent.parent == Path("results")


@needs_mpi
def test_duration_runs_passes_into_one_folder_and_a_sag_is_named(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE.replace("SPIN", "100"))
    (tmp_path / "rules.yaml").write_text(RULES)
    out, runner = tmp_path / "run", CliRunner()
    t0 = time.monotonic()
    res = runner.invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", "--duration", "5s"])
    took_s = time.monotonic() - t0
    assert res.exit_code == 0, res.output
    passes = _passes(out)
    assert passes == sorted(passes) and passes.count(1) == 2 and len(passes) == 2 * max(passes)
    # at least 2 passes, unless a loaded machine made the first pass itself outlast the duration
    assert max(passes) >= 2 or took_s >= 5, (passes, took_s)
    if max(passes) == 1:   # then one more pass, so that the sag below has steady passes before it
        res = runner.invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", "--duration", "1s", "--resume"])
        assert res.exit_code == 0, res.output
        passes = _passes(out)
    assert all(r.get("pass_utc") for r in RunFolder(out).rows())
    assert "pass" in pd.read_csv(out / "results.csv").columns
    assert "## Burn-in" in (out / "report.md").read_text()
    res = runner.invoke(cli, ["accept", str(out), "--rules", str(tmp_path / "rules.yaml")])
    assert res.exit_code == 0, res.output
    # the node slows down: the burn-in continues with every spin 60% longer
    res = runner.invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", "--duration", "1s", "--resume",
                              "--force", "--set", "params.slow_pct=60"])
    assert res.exit_code == 0, res.output
    last = max(_passes(out))
    assert last == max(passes) + 1
    res = runner.invoke(cli, ["accept", str(out), "--rules", str(tmp_path / "rules.yaml")])
    assert res.exit_code == 1, res.output
    assert "spin-steady on " in res.output and f"worst pass {last}" in res.output


@needs_mpi
def test_sigint_mid_pass_keeps_the_passes_and_exits_130(tmp_path):
    suite = tmp_path / "s.yaml"
    # a pass of about 8 s: 8B at once, then 4KiB spins of 2 ms... and 1 MiB spins of 1 s
    suite.write_text(SUITE.replace("SPIN", "1000").replace("[8B, 4KiB]", "[8B, 4KiB, 1MiB]"))
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "commbench", "run", str(suite), "--out", str(out), "--quiet",
                             "--duration", "10m"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline and len(_passes(out) if (out / "results.jsonl").exists() else []) < 2:
        time.sleep(0.2)   # two Cases of pass 1 stored: the 1 MiB one is running
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130, output
    assert "every row measured so far" in output
    assert _passes(out) == [1, 1]   # the cut pass keeps its rows, stamped
    res = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", "--duration", "1s",
                                   "--resume"])
    assert res.exit_code == 0, res.output
    assert _passes(out) == [1, 1, 2, 2, 2]   # the resume numbers on


def test_a_failure_in_an_earlier_pass_fails_the_burnin(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    rows = [{"case_id": "a", "status": "failed", "pass": 1}, {"case_id": "a", "status": "ok", "pass": 2}]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, summary = burnin_exit_status(out, 2, 0, "1 ok, 0 skipped -> exit 0")
    assert code == 1 and "1 row(s) of the burn-in not correct or not finished (pass 1)" in summary
    (check,) = burnin_checks(_run_of(out), [], select)   # accept says so too, naming the pass
    assert not check["passed"] and check["reason"].startswith("first in pass 1 on ")
    (out / "results.jsonl").write_text(json.dumps(rows[1]) + "\n")
    assert burnin_exit_status(out, 2, 0, "1 ok -> exit 0") == (
        0, "1 ok in the last pass; 2 pass(es) this call -> exit 0")
    (check,) = burnin_checks(_run_of(out), [], select)
    assert check["passed"] and check["check"] == "burn-in: every pass's rows"


def test_resume_finishes_a_pass_a_kill_left_unstamped_then_numbers_on(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    rows = [{"case_id": "a", "status": "ok", "pass": 1, "pass_utc": "t1"}, {"case_id": "a", "status": "ok"}]
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    now, seen = [0.0], []

    def run_one(out_dir, again, before_finish):
        seen.append((again, before_finish.__defaults__[0]))   # the pass number it will stamp
        now[0] += 1.0
        return out_dir

    assert run_burnin(NAMED, out, 1.5, resume=True, run_one=run_one, clock=lambda: now[0]) == (out, 2)
    assert seen == [(True, 2), (True, 3)]


def test_duration_option_and_suite_key(tmp_path):
    from click.testing import CliRunner

    from commbench.commands.run_cmd import _cli_duration_s

    assert _cli_duration_s("90s") == 90 and _cli_duration_s(None) is None
    with pytest.raises(Exception, match="--duration"):
        _cli_duration_s("forever")
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE.replace("SPIN", "100").replace("name: burn\n", "name: burn\nduration: 2m\n"))
    result = CliRunner().invoke(cli, ["run", str(suite), "--repeat", "3", "--dry-run"])
    assert result.exit_code == 2 and "--repeat" in result.output
    result = CliRunner().invoke(cli, ["run", str(suite), "--duration", "-5m", "--dry-run"])
    assert result.exit_code == 2 and "--duration" in result.output


def _samples(folder, cid, times, **extra):
    folder.append_samples([{"case_id": cid, "rank": 0, "host": "h", "gpu": "", "iteration": i, "time_us": t, **extra}
                           for i, t in enumerate(times)])


def test_samples_carry_their_pass_and_a_cut_remeasure_is_dropped(tmp_path):
    """Samples are stamped with the pass as rows are: the passes of one Case can be told apart, and
    the samples of a re-measurement killed before its row (pass 2) go, pass 1's stay."""
    from commbench.runfolder.reader import iteration_times, load_samples

    folder = RunFolder(tmp_path / "run")
    folder.claim(resume=False)
    try:
        _samples(folder, "a", [1.0, 1.0])
        folder.append_row({"case_id": "a", "status": "ok", "time_us": 1.0})
        stamp_pass(folder, 1, "2026-01-01T00:00:00")
        _samples(folder, "a", [9.0, 9.0])   # pass 2 re-measures a: killed before its row
        assert folder.keep_samples(folder.done_case_ids()) == 2
        _samples(folder, "a", [2.0, 3.0])
        folder.append_row({"case_id": "a", "status": "ok", "time_us": 2.0})
        assert folder.keep_samples(folder.done_case_ids()) == 0
        stamp_pass(folder, 2, "2026-01-01T00:01:00")
    finally:
        folder.release()
    samples = load_samples(tmp_path / "run")
    assert list(samples["pass"]) == [1, 1, 2, 2] and list(samples["time_us"]) == [1.0, 1.0, 2.0, 3.0]
    # per iteration: the last pass's samples, as results.csv holds the last pass's row
    assert list(iteration_times(samples)["time_us"]) == [2.0, 3.0]


def test_a_pass_without_samples_still_starts_the_column(tmp_path):
    folder = RunFolder(tmp_path / "run")
    folder.claim(resume=False)
    try:
        folder.append_row({"case_id": "s", "status": "skipped"})
        stamp_pass(folder, 1, "2026-01-01T00:00:00")   # pass 1 measured nothing
        _samples(folder, "a", [1.0], compute_us=0.5)    # a wider header on the way
        folder.append_row({"case_id": "a", "status": "ok", "time_us": 1.0})
        stamp_pass(folder, 2, "2026-01-01T00:01:00")
    finally:
        folder.release()
    text = (tmp_path / "run" / "samples.csv").read_text().splitlines()
    assert text[0].split(",")[-2:] == ["pass", "compute_us"] and text[1].split(",")[-2:] == ["2", "0.5"], text


def test_an_older_burn_in_s_samples_are_left_without_a_pass(tmp_path):
    """samples.csv of a burn-in begun before samples were stamped: which pass wrote a line is not
    known, so no pass is made up; ended passes' Cases keep their samples as before."""
    folder = RunFolder(tmp_path / "run")
    folder.claim(resume=False)
    try:
        _samples(folder, "a", [1.0])
        folder.append_row({"case_id": "a", "status": "ok", "time_us": 1.0, "pass": 1, "pass_utc": "x"})
        _samples(folder, "a", [2.0])
        folder.append_row({"case_id": "a", "status": "ok", "time_us": 2.0})
        before = (tmp_path / "run" / "samples.csv").read_bytes()
        stamp_pass(folder, 2, "2026-01-01T00:01:00")
        assert (tmp_path / "run" / "samples.csv").read_bytes() == before
        assert folder.keep_samples(set()) == 0   # a's rows are all stamped: its samples stay
    finally:
        folder.release()
