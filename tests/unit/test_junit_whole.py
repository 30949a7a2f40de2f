"""`accept --junit` (and --json) on a full disk: the file is written whole or not at all
(analysis/accept/junit.py write_junit, analysis/outputs.py write_text_whole): never a 0-byte or cut
XML that CI would read as no tests, and the error names the option."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.analysis.accept.junit import write_junit
from commbench.cli import cli
from commbench.errors import CommbenchError

ROOT = Path(__file__).resolve().parents[2]


def full_disk(monkeypatch):
    """Every write of a whole file fails part way, as on a full disk."""
    def cut(fd, data):
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("commbench.runfolder.files._write_all", cut)


def test_write_junit_leaves_no_file_on_a_full_disk(tmp_path, monkeypatch):
    full_disk(monkeypatch)
    with pytest.raises(CommbenchError, match="--junit"):
        write_junit(tmp_path / "a.xml", "<testsuites/>\n")
    assert os.listdir(tmp_path) == []


def test_write_junit_keeps_the_previous_file_whole_on_a_full_disk(tmp_path, monkeypatch):
    (tmp_path / "a.xml").write_text("<old/>\n")
    full_disk(monkeypatch)
    with pytest.raises(CommbenchError):
        write_junit(tmp_path / "a.xml", "<testsuites>" + "x" * 10000 + "</testsuites>\n")
    assert (tmp_path / "a.xml").read_text() == "<old/>\n" and os.listdir(tmp_path) == ["a.xml"]


def test_write_junit_writes_the_whole_text(tmp_path):
    write_junit(tmp_path / "a.xml", "<testsuites/>\n")
    assert (tmp_path / "a.xml").read_text() == "<testsuites/>\n"


@pytest.mark.parametrize("option", ["--junit", "--json"])
def test_accept_on_a_full_disk_leaves_no_cut_file_and_names_the_option(tmp_path, monkeypatch, option):
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "cpu-base", run)
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {name: r, metric: time_us, op: '>=', value: 0}\n")
    out = tmp_path / "outs"
    out.mkdir()
    full_disk(monkeypatch)
    monkeypatch.setattr("commbench.analysis.report.build._replace", lambda path, data: path.write_bytes(data))
    result = CliRunner().invoke(cli, ["accept", str(run), "--rules", str(rules), option, str(out / "v.out")])
    assert result.exit_code == 2, result.output
    assert f"cannot write {out / 'v.out'}" in result.output and option in result.output
    assert os.listdir(out) == []
