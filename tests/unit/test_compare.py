"""compare: a run against itself is unchanged; a 2x slowdown is worse with small p-values."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from commbench.analysis.compare import CompareSettings, compare_runs, regressions, summarize
from commbench.analysis.commands import compare_cmd
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


def test_without_samples_or_repeats_threshold_decides(tmp_path):
    base, slow = load_run(RUNS / "cpu-base"), load_run(RUNS / "cpu-slow2x")
    base.samples, slow.samples = base.samples.iloc[0:0], slow.samples.iloc[0:0]
    pts = compare_runs(base, slow, CompareSettings(threshold_pct=5))
    assert set(pts["verdict"]) == {"worse"} and pts["p_value"].isna().all()
    assert set(pts["why"]) == {"no samples or repeats: threshold only"}
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
