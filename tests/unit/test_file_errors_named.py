"""A named file instead of a last-resort message: an empty size_bytes cell (compare, report,
accept), a report into a full or read-only folder, and no cut report left (issue 31 item 9)."""
from __future__ import annotations

import csv
import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.analysis.import_nccl_tests import import_files
from commbench.analysis.report import build
from commbench.cli import cli
from commbench.runfolder import files

FX = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_tests"
RULE = "rules:\n  - {name: r, select: {op: sendrecv}, metric: busbw_gbps, op: '>=', value: 0}\n"


def _cli(*args) -> tuple[int, str]:
    res = CliRunner().invoke(cli, [str(a) for a in args])
    assert "Traceback" not in res.output and "this is a bug" not in res.output, res.output
    return res.exit_code, res.output


@pytest.fixture()
def good(tmp_path) -> Path:
    folder, _ = import_files([FX / "sendrecv_perf.txt"], tmp_path / "good")
    return folder


def _emptied(good: Path, tmp_path: Path, column: str, data_row: int) -> Path:
    bad = tmp_path / "bad"
    import_files([FX / "sendrecv_perf.txt"], bad)
    path = bad / "results.csv"
    rows = list(csv.reader(path.open(newline="")))
    rows[data_row][rows[0].index(column)] = ""
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    return bad


def test_an_empty_size_cell_is_named_by_every_reader(good, tmp_path):
    bad = _emptied(good, tmp_path, "size_bytes", 3)   # line 4 of the file
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULE)
    for args in (("compare", good, bad), ("compare", bad, good), ("report", bad, "--out", tmp_path / "r.html"),
                 ("accept", bad, "--rules", rules, "--out", tmp_path / "a.html")):
        code, out = _cli(*args)
        assert code == 2, (args, out)
        assert "results.csv:4" in out and "size_bytes" in out, (args, out)


@pytest.mark.parametrize("err, where", [(errno.ENOSPC, "fsync"), (errno.EROFS, "replace")])
def test_a_report_into_a_full_or_read_only_folder_is_named_and_not_cut(good, tmp_path, monkeypatch, err, where):
    out = tmp_path / "r.html"
    out.write_text("previous report\n")

    def fail(*a, **k):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(files.os, where, fail)
    code, text = _cli("report", good, "--out", out)
    assert code == 1 and "r.html" in text and os.strerror(err) in text, text
    assert out.read_text() == "previous report\n"
    assert not (tmp_path / "r.md").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no twin left


def test_the_report_written_at_the_end_of_a_run_is_whole(good):
    html_path, md_path = build.write_report([good])
    assert html_path == good / "report.html" and html_path.read_text().rstrip().endswith("</html>")
    assert md_path.read_text().strip() and not list(good.glob(".report.*"))
