"""No link inside a run folder is followed (runfolder/files.py, writer, reader): --resume writes only
into a folder commbench wrote, whole-file writes replace a link and never its target, names read
from a folder are validated, and a read-only folder or a full disk is named."""
from __future__ import annotations

import errno
import json
import os
import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.errors import RunFolderError, StorageFull
from commbench.runfolder import RunFolder, files
from commbench.runfolder.lock import LOCK_NAME
from commbench.runfolder.reader import load_run

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "runs" / "cpu-base"
SUITE = textwrap.dedent("""\
    name: g
    defaults: {ranks: 2, warmup: 1, iters: 3, sizes: [8B]}
    benchmarks:
      - {name: first, family: harness, ops: [barrier]}
    """)


def row(cid: str, status: str = "ok") -> dict:
    return {"case_id": cid, "status": status, "time_us": 1.0, "wrong": 0, "size_bytes": 8}


def sample(cid: str, i: int) -> dict:
    return {"case_id": cid, "rank": 0, "host": "h", "gpu": "cpu", "iteration": i, "time_us": 1.0}


def _run_folder(path: Path) -> RunFolder:
    """A run folder as `commbench run` leaves it: locked once, run.json, a Case with samples."""
    f = RunFolder(path)
    f.claim(resume=False)
    f.write_meta({"suite": "g"})
    f.append_samples([sample("a", i) for i in range(2)])
    f.append_row(row("a"))
    f.release()
    return f


def _resume(tmp_path: Path, out: Path):
    suite = tmp_path / "g.yaml"
    suite.write_text(SUITE)
    return CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--resume", "--quiet"])


def _tree(path: Path) -> dict:
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
            for p in sorted(path.rglob("*"))}


def test_resume_refuses_a_folder_that_is_no_run_folder_reached_through_a_link(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    link = tmp_path / "out"
    link.symlink_to(etc)
    before = _tree(etc)
    res = _resume(tmp_path, link)
    assert res.exit_code == 2, res.output
    assert "is not a run folder commbench wrote" in res.output and "no run.json" in res.output
    assert _tree(etc) == before   # not even a lock file or logs/ was written there


def test_resume_refuses_a_run_json_that_is_not_commbench_s(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"name": "something else"}))
    (out / "logs").mkdir()
    res = _resume(tmp_path, out)
    assert res.exit_code == 2 and "names no suite" in res.output, res.output
    assert not (out / LOCK_NAME).exists()


@pytest.mark.parametrize("planted", ["results.jsonl", "samples.csv", "logs"])
def test_resume_refuses_a_link_planted_inside_the_run_folder(tmp_path, planted):
    out = tmp_path / "run"
    _run_folder(out)
    outside = tmp_path / "outside"
    if planted == "logs":
        outside.mkdir()
        (out / "logs").rmdir()
    else:
        outside.write_bytes((out / planted).read_bytes())
        (out / planted).unlink()
    (out / planted).symlink_to(outside)
    before = _tree(outside) if outside.is_dir() else outside.read_bytes()
    res = _resume(tmp_path, out)
    assert res.exit_code == 2, res.output
    assert "symbolic link" in res.output and planted in res.output
    assert (_tree(outside) if outside.is_dir() else outside.read_bytes()) == before


def test_the_writer_never_reads_or_appends_through_a_link(tmp_path):
    outside = tmp_path / "victim"
    outside.write_text('{"case_id": "x", "status": "ok", "time_us": 1}\n')
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.jsonl").symlink_to(outside)
    f = RunFolder(folder)
    with pytest.raises(files.LinkRefused):
        f.latest_rows()
    with pytest.raises(files.LinkRefused):
        f.append_row(row("a"))
    assert outside.read_text() == '{"case_id": "x", "status": "ok", "time_us": 1}\n'
    (folder / "logs").mkdir()
    (folder / "logs" / "launch-0.log").symlink_to(outside)
    with pytest.raises(files.LinkRefused):
        files.append(folder, "logs/launch-0.log", b"appended\n")
    assert "appended" not in outside.read_text()


def test_a_whole_file_write_replaces_a_link_never_its_target(tmp_path):
    outside = tmp_path / "victim"
    outside.write_text("keep")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run.json").symlink_to(outside)
    RunFolder(folder).write_meta({"suite": "g"})
    assert outside.read_text() == "keep"
    assert not (folder / "run.json").is_symlink() and json.loads((folder / "run.json").read_text())["suite"] == "g"


def test_the_reader_refuses_a_results_file_that_is_a_link(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("run.json", "samples.csv"):
        (run / name).write_bytes((FIXTURE / name).read_bytes())
    (tmp_path / "elsewhere.csv").write_bytes((FIXTURE / "results.csv").read_bytes())
    (run / "results.csv").symlink_to(tmp_path / "elsewhere.csv")
    with pytest.raises(RunFolderError, match="symbolic link"):
        load_run(run)


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "", "x\x00y", "l\nf", "é" * 200])
def test_names_from_a_folder_s_contents_are_validated(name):
    with pytest.raises(RunFolderError):
        files.safe_name(name)


def test_a_case_id_and_a_file_name_are_checked_by_one_rule():
    """runfolder/files.name_problem: a case id (it becomes a file name under traces/) is a file
    name that may not start with '.'; the folder's own names may (.results.csv.tmp)."""
    from commbench.runfolder.timeline_files import case_id_problem

    for name in ("../x", "a/b", "a\\b", "..", ".", "", "x\x00y", "l\nf", "z" * 300):
        assert files.name_problem(name) and case_id_problem(name), name
        with pytest.raises(RunFolderError, match=re.escape(files.name_problem(name))):
            files.safe_name(name)
    assert files.name_problem(".results.csv.tmp") is None and case_id_problem(".hidden")
    assert case_id_problem("z" * 201) and files.name_problem("z" * 201) is None   # a case id leaves room


def test_a_read_only_folder_is_named(tmp_path, monkeypatch):
    f = RunFolder(tmp_path)
    real = os.open

    def read_only(path, flags, *a, **kw):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(path, flags, *a, **kw)

    monkeypatch.setattr(files.os, "open", read_only)
    with pytest.raises(RunFolderError, match=r"run\.json: Read-only file system"):
        f.write_meta({"suite": "g"})
    with pytest.raises(RunFolderError, match=r"results\.jsonl: Read-only"):
        f.append_row(row("a"))
    monkeypatch.setattr(files.os, "open", real)
    assert not list(tmp_path.iterdir())


def test_a_full_disk_during_a_whole_file_write_is_named_and_leaves_no_twin(tmp_path, monkeypatch):
    f = RunFolder(tmp_path)
    f.write_meta({"suite": "g"})

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "write", full)
    with pytest.raises(StorageFull, match=r"run\.json"):
        f.write_meta({"suite": "g", "more": 1})
    monkeypatch.undo()
    assert json.loads((tmp_path / "run.json").read_text()) == {"schema_version": 1, "suite": "g"}
    assert not list(tmp_path.glob(".*.tmp"))
