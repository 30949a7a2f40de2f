"""compare: a run against itself is unchanged; a 2x slowdown is worse with small p-values."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from commbench.analysis.compare import CANT_TELL, CompareSettings, compare_runs, regressions
from commbench.analysis.compare_summary import summarize
from commbench.commands.compare_cmd import compare_cmd
from commbench.cli import cli
from commbench.runfolder.reader import load_run

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def test_self_compare_is_unchanged_everywhere():
    run = load_run(RUNS / "cpu-base")
    pts = compare_runs(run, run)
    assert set(pts["verdict"]) == {"unchanged"}
    assert (pts["time_ratio"] == 1.0).all()
    assert (summarize(pts)["gmean_time_ratio"] == 1.0).all()


def test_rerun_noise_is_unchanged():
    pts = compare_runs(load_run(RUNS / "cpu-base"), load_run(RUNS / "cpu-rerun"))
    assert set(pts["verdict"]) == {"unchanged"}


def test_2x_slowdown_is_worse_with_p_values():
    pts = compare_runs(load_run(RUNS / "cpu-base"), load_run(RUNS / "cpu-slow2x"))
    assert set(pts["verdict"]) == {"worse"}
    assert (pts["p_value"] < 0.001).all()
    s = summarize(pts)
    assert s["gmean_time_ratio"].between(1.9, 2.1).all()
    assert s["gmean_busbw_ratio"].between(0.47, 0.53).all()
    assert len(regressions(pts, 50.0)) == len(pts) and regressions(pts, 150.0).empty


def test_reverse_is_better_and_bad_rows_not_comparable():
    pts = compare_runs(load_run(RUNS / "cpu-slow2x"), load_run(RUNS / "cpu-base"))
    assert set(pts["verdict"]) == {"better"}
    pts = compare_runs(load_run(RUNS / "cpu-base"), load_run(RUNS / "cpu-damaged"))
    bad = pts[pts["verdict"] == "not comparable"]
    assert len(bad) == 4 and bad["why"].str.startswith("status").all()


def test_without_samples_or_repeats_a_change_is_cant_tell(tmp_path):
    base, slow = load_run(RUNS / "cpu-base"), load_run(RUNS / "cpu-slow2x")
    base.samples, slow.samples = base.samples.iloc[0:0], slow.samples.iloc[0:0]
    pts = compare_runs(base, slow, CompareSettings(threshold_pct=5))
    assert set(pts["verdict"]) == {CANT_TELL} and pts["p_value"].isna().all()
    assert pts["why"].str.endswith("the noise is unknown: no samples or repeats on either side").all()
    same = compare_runs(base, base, CompareSettings(threshold_pct=5))
    assert set(same["verdict"]) == {"unchanged"}
    assert set(same["why"]) == {"no samples or repeats: threshold only"}
    # samples on one side are enough to weigh the noise
    pts = compare_runs(load_run(RUNS / "cpu-base"), slow)
    assert set(pts["verdict"]) == {"worse"} and pts["p_value"].notna().all()


def test_cli_fail_above_exit_status(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(compare_cmd, [str(RUNS / "cpu-base"), str(RUNS / "cpu-rerun"),
                                     "--fail-above", "10", "--out", str(tmp_path / "c.html")])
    assert ok.exit_code == 0, ok.output
    assert "worse" in (tmp_path / "c.md").read_text()  # column header of the summary
    bad = runner.invoke(compare_cmd, [str(RUNS / "cpu-base"), str(RUNS / "cpu-slow2x"),
                                      "--fail-above", "10"])
    assert bad.exit_code == 1


def _copy_run(src, dst, drop_ops=(), status=None):
    """A copy of a fixture run folder with some ops' rows dropped or their status changed."""
    import shutil

    import pandas as pd

    shutil.copytree(src, dst)
    df = pd.read_csv(dst / "results.csv", keep_default_na=False)
    df = df[~df["op"].isin(drop_ops)]
    if status:
        op, st = status
        df.loc[df["op"] == op, "status"] = st
        df.loc[df["op"] == op, "reason"] = "injected"
    df.to_csv(dst / "results.csv", index=False)
    return dst


def test_fail_above_fails_and_lists_missing_and_failed_points(tmp_path):
    runner = CliRunner()
    new = _copy_run(RUNS / "cpu-rerun", tmp_path / "new", drop_ops=["sendrecv"], status=("reduce", "failed"))
    res = runner.invoke(compare_cmd, [str(RUNS / "cpu-base"), str(new), "--fail-above", "50"])
    assert res.exit_code == 1, res.output
    assert "failing points (28)" in res.output          # 14 sendrecv missing + 14 reduce failed
    assert "missing in new" in res.output and "status base=ok new=failed" in res.output
    listed = [ln.split()[0] for ln in res.output.split("failing points (28):")[1].splitlines()[3:] if ln.strip()]
    assert {"sendrecv", "reduce"} <= set(listed)
    assert "FAIL: 28 point(s)" in res.output
    # without --fail-above the same comparison only reports
    assert runner.invoke(compare_cmd, [str(RUNS / "cpu-base"), str(new)]).exit_code == 0


def test_fail_above_lists_the_worse_points(tmp_path):
    res = CliRunner().invoke(compare_cmd, [str(RUNS / "cpu-base"), str(RUNS / "cpu-slow2x"), "--fail-above", "10"])
    assert res.exit_code == 1
    assert "failing points (84)" in res.output
    assert sum(ln.rstrip().endswith(" worse") for ln in res.stdout.split("failing points (84):")[1].splitlines()) == 84


def test_nothing_comparable_fails(tmp_path):
    new = _copy_run(RUNS / "cpu-base", tmp_path / "new", status=("", ""))
    import pandas as pd

    df = pd.read_csv(new / "results.csv", keep_default_na=False)
    df["status"], df["reason"] = "skipped", "no GPU"
    df.to_csv(new / "results.csv", index=False)
    res = CliRunner().invoke(compare_cmd, [str(RUNS / "cpu-base"), str(new), "--fail-above", "5"])
    assert res.exit_code == 1 and "status base=ok new=skipped" in res.output
    # skipped on both sides is not a failure, but nothing compared is
    res = CliRunner().invoke(compare_cmd, [str(new), str(new), "--fail-above", "5"])
    assert res.exit_code == 1 and "nothing comparable" in res.output


def test_points_only_in_new_do_not_fail(tmp_path):
    base = _copy_run(RUNS / "cpu-base", tmp_path / "base", drop_ops=["sendrecv"])
    res = CliRunner().invoke(compare_cmd, [str(base), str(RUNS / "cpu-rerun"), "--fail-above", "10"])
    assert res.exit_code == 0, res.output
    assert "PASS" in res.output


def test_several_runs_per_side_and_repeat_folders(tmp_path):
    import shutil

    runner = CliRunner()
    rep = tmp_path / "rep"
    for k, src in enumerate(("cpu-base", "cpu-rerun"), 1):
        shutil.copytree(RUNS / src, rep / f"repeat-{k}")
    res = runner.invoke(compare_cmd, [str(rep), str(RUNS / "cpu-slow2x"), "--fail-above", "10",
                                      "--out", str(tmp_path / "c.html")])
    assert res.exit_code == 1 and "failing points (84)" in res.output
    assert "(2 repeats)" in (tmp_path / "c.md").read_text()
    res = runner.invoke(compare_cmd, [str(RUNS / "cpu-base"), str(RUNS / "cpu-rerun"), "vs",
                                      str(RUNS / "cpu-rerun"), str(RUNS / "cpu-base"), "--fail-above", "10"])
    assert res.exit_code == 0, res.output
    for bad in ([str(RUNS / "cpu-base")], [str(RUNS / "cpu-base"), "vs"],
                [str(RUNS / "cpu-base"), str(RUNS / "cpu-rerun"), str(RUNS / "cpu-slow2x")]):
        res = runner.invoke(cli, ["compare", *bad])
        assert res.exit_code == 2 and "vs" in res.output


def test_a_busy_machine_is_named_in_the_terminal_and_the_report(tmp_path):
    import json
    import shutil

    busy = tmp_path / "busy"
    shutil.copytree(RUNS / "cpu-rerun", busy)
    meta = json.loads((busy / "run.json").read_text())
    meta["machine_load"] = {"own_ranks": 2,
                            "before": {"load_avg_1m": 9.5, "cpus_usable": 4, "cpu_count": 4, "gpu_processes": []},
                            "after": {"load_avg_1m": 3.0, "cpus_usable": 4, "cpu_count": 4,
                                      "gpu_processes": [{"pid": 42, "name": "python"}]}}
    (busy / "run.json").write_text(json.dumps(meta))
    res = CliRunner().invoke(cli, ["compare", str(RUNS / "cpu-base"), str(busy),
                                                   "--out", str(tmp_path / "c.html")])
    assert res.exit_code == 0
    assert "load average 9.5 on 4 CPU(s) before the run" in res.stderr
    assert "1 other process(es) on the GPUs after the run" in res.stderr
    assert "load average 3.0" not in res.stderr          # 3.0 less our 2 ranks is quiet
    assert "the machine was busy" in (tmp_path / "c.md").read_text()


def test_nan_inf_or_negative_gates_are_bad_input():
    """A NaN --fail-above passes every point (no ratio is above NaN): such gates are refused."""
    runner = CliRunner()
    base, slow = str(RUNS / "cpu-base"), str(RUNS / "cpu-slow2x")
    for opt, value in (("--fail-above", "nan"), ("--fail-above", "inf"), ("--fail-above", "-5"),
                       ("--threshold", "nan"), ("--threshold", "inf")):
        args = [base, slow, opt, value] + (["--fail-above", "10"] if opt == "--threshold" else [])
        res = runner.invoke(cli, ["compare", *args])
        assert res.exit_code == 2, (opt, value, res.output)
        assert "PASS" not in res.output and opt in res.output
