"""Reports of `run --repeat` sets: each repeat is named with its set (two sets are not both
repeat-1..N, nor merged into one line), and a report of one set lands in that set's folder."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from click.testing import CliRunner

from commbench.analysis.commands import report_cmd
from commbench.analysis.report.build import build_report
from commbench.analysis.runsets import expand, shown_labels
from commbench.runfolder.reader import load_run

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _repeat_set(folder: Path, sources: list[str]) -> Path:
    for i, name in enumerate(sources, 1):
        shutil.copytree(RUNS / name, folder / f"repeat-{i}")
    return folder


def test_two_sets_are_titled_by_their_set_and_not_merged(tmp_path):
    a = _repeat_set(tmp_path / "set-a", ["cpu-base", "cpu-rerun"])
    b = _repeat_set(tmp_path / "set-b", ["cpu-slow2x", "cpu-base"])
    runs = [load_run(p) for p in expand([a, b])]
    assert shown_labels(runs) == ["set-a/repeat-1", "set-a/repeat-2", "set-b/repeat-1", "set-b/repeat-2"]
    doc = build_report(runs)
    assert doc.title.endswith("set-a/repeat-1, set-a/repeat-2, set-b/repeat-1, set-b/repeat-2")
    summary = doc.sections[0].items[1]
    assert set(summary["run"]) == {"set-a/repeat-1", "set-a/repeat-2", "set-b/repeat-1", "set-b/repeat-2"}
    # one summary line per run and op/backend: nothing of set-b folded into set-a's lines
    per_run = summary.groupby("run").size()
    assert per_run.nunique() == 1 and len(summary) == 4 * per_run.iloc[0]


def test_same_named_runs_of_different_folders_differ():
    class R:   # shown_labels reads only .path
        def __init__(self, p):
            self.path = Path(p)
    assert shown_labels([R("/x/a/run"), R("/x/b/run"), R("/x/c/other")]) == ["a/run", "b/run", "other"]


def test_report_of_one_set_writes_into_the_set(tmp_path):
    s = _repeat_set(tmp_path / "set", ["cpu-base", "cpu-rerun", "cpu-slow2x"])
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    before = os.getcwd()
    os.chdir(elsewhere)
    try:
        res = CliRunner().invoke(report_cmd, [str(s)])
    finally:
        os.chdir(before)
    assert res.exit_code == 0, res.output
    assert (s / "report.html").is_file() and (s / "report.md").is_file()
    assert list(elsewhere.iterdir()) == []
    assert "set/repeat-3" in (s / "report.md").read_text()


def test_report_of_two_sets_goes_to_out(tmp_path):
    a = _repeat_set(tmp_path / "set-a", ["cpu-base"])
    b = _repeat_set(tmp_path / "set-b", ["cpu-rerun"])
    res = CliRunner().invoke(report_cmd, [str(a), str(b), "--out", str(tmp_path / "both.html")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "both.md").read_text()
    assert "set-a/repeat-1" in md and "set-b/repeat-1" in md
