"""`commbench run`'s exit status from the stored rows (commbench/verdict.py), without a launch:
0 only when every Case is ok or skipped and something was measured; repeats are summed. The same
through real runs: tests/unit/test_run_exit_status.py (marked mpi)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from commbench.verdict import run_exit_status

BASE = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "cpu-base"


def _run(tmp_path: Path, name: str, statuses: list[str]) -> Path:
    """cpu-base with its first rows given ``statuses`` and the rest dropped (samples kept only for
    the rows left)."""
    out = tmp_path / name
    shutil.copytree(BASE, out)
    rows = pd.read_csv(out / "results.csv").head(len(statuses)).copy()
    rows["status"] = statuses
    rows["reason"] = ["" if s == "ok" else f"made {s} by the test" for s in statuses]
    rows.to_csv(out / "results.csv", index=False)
    samples = pd.read_csv(out / "samples.csv")
    samples[samples.case_id.isin(rows.case_id)].to_csv(out / "samples.csv", index=False)
    return out


def test_all_ok_exits_0_with_the_counts(tmp_path):
    code, line = run_exit_status(_run(tmp_path, "r", ["ok", "ok"]))
    assert (code, line) == (0, "2 ok, 0 skipped, 0 wrong, 0 failed, 0 timeout -> exit 0")


def test_skipped_cases_do_not_fail_a_run_that_measured(tmp_path):
    code, line = run_exit_status(_run(tmp_path, "r", ["ok", "skipped"]))
    assert code == 0 and line.startswith("1 ok, 1 skipped,")


@pytest.mark.parametrize("bad", ["wrong", "failed", "timeout"])
def test_one_failing_status_exits_1_and_says_how_many(tmp_path, bad):
    code, line = run_exit_status(_run(tmp_path, "r", ["ok", bad, "ok"]))
    assert code == 1 and f"1 {bad}" in line and "1 Case(s) not correct or not finished -> exit 1" in line


def test_nothing_measured_exits_1(tmp_path):
    code, line = run_exit_status(_run(tmp_path, "r", ["skipped", "skipped"]))
    assert code == 1 and line.startswith("0 ok, 2 skipped,") and "nothing was measured" in line


def test_a_folder_without_readable_rows_is_nothing_measured(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_exit_status(empty)[0] == 1


def test_repeats_are_summed_and_one_bad_repeat_fails_them_all(tmp_path):
    good = [_run(tmp_path, "repeat-1", ["ok"]), _run(tmp_path, "repeat-2", ["ok"])]
    assert run_exit_status(good) == (0, "2 ok, 0 skipped, 0 wrong, 0 failed, 0 timeout over 2 repeats -> exit 0")
    code, line = run_exit_status([*good, _run(tmp_path, "repeat-3", ["timeout"])])
    assert code == 1 and "2 ok" in line and "1 timeout over 3 repeats" in line
