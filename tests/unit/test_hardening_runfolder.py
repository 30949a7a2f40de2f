"""The run folder as a fortress (issue 31, items 5-7): no link inside it is followed, --resume
writes only into a folder commbench wrote, the lock survives deleting its file, readers refuse a
folder a live run writes, and --resume repairs before it measures."""
from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.errors import RunFolderError, StorageFull
from commbench.runfolder import RunFolder, files
from commbench.runfolder.lock import LOCK_NAME, FolderLock, RunFolderBusy, holder_alive, writer_holding
from commbench.runfolder.reader import load, load_run
from tests.conftest import needs_mpi

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


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


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


# -- item 5: --resume recognises a run folder; links inside one are refused ------------------------

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


# -- item 6: the lock survives deleting its file; readers refuse a folder being written -------------

HOLD = textwrap.dedent("""\
    import sys, time
    from commbench.runfolder.lock import FolderLock
    FolderLock(sys.argv[1]).acquire()
    print("held", flush=True)
    time.sleep(60)
    """)


@pytest.fixture
def held(tmp_path):
    """A folder whose lock another process holds (as a live `commbench run` does)."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("run.json", "results.csv", "samples.csv"):
        (run / name).write_bytes((FIXTURE / name).read_bytes())
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True, env=_env())
    assert proc.stdout.readline().strip() == "held"
    yield run, proc
    proc.kill()
    proc.wait()


def test_deleting_the_lock_file_does_not_let_a_second_writer_in(held):
    run, proc = held
    assert f"pid {proc.pid} start " in (run / LOCK_NAME).read_text()
    (run / LOCK_NAME).unlink()
    with pytest.raises(RunFolderBusy, match="being written by another commbench run"):
        FolderLock(run).acquire()
    (run / LOCK_NAME).write_text("")   # replaced by something else: still refused
    with pytest.raises(RunFolderBusy):
        RunFolder(run).claim(resume=True)


@pytest.mark.parametrize("command", [["report"], ["compare"], ["accept"]])
def test_readers_refuse_a_folder_a_live_run_writes(held, command, tmp_path):
    run, proc = held
    args = [*command, str(run)]
    if command == ["compare"]:
        other = tmp_path / "other"
        other.mkdir()
        for name in ("run.json", "results.csv", "samples.csv"):
            (other / name).write_bytes((FIXTURE / name).read_bytes())
        args.append(str(other))
    if command == ["accept"]:
        rules = tmp_path / "rules.yaml"
        rules.write_text("rules:\n  - {name: r, select: {}, metric: busbw_gbps, aggregate: min, op: '>=', "
                         "value: 0}\n")
        args = ["accept", str(run), "--rules", str(rules)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 2, res.output
    assert "a run is still writing this folder" in res.output and f"pid {proc.pid}" in res.output
    assert not (run / "report.html").exists()


def test_the_lock_holder_reads_its_own_folder_and_others_after_it_ends(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for name in ("run.json", "results.csv", "samples.csv"):
        (run / name).write_bytes((FIXTURE / name).read_bytes())
    lock = FolderLock(run).acquire()
    assert writer_holding(run) is None   # this process: a run's own summary and report
    assert len(load(run))
    lock.release()
    assert writer_holding(run) is None


def test_a_dead_holder_is_told_apart_from_a_live_one(tmp_path, held, monkeypatch):
    run, proc = held
    host = socket.gethostname()
    assert holder_alive((run / LOCK_NAME).read_text())
    assert not holder_alive(f"pid {proc.pid} start 1 on host {host} since x")   # the pid was reused
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert not holder_alive(f"pid {dead.stdout.strip()} start 5 on host {host} since x")
    assert holder_alive(f"pid {dead.stdout.strip()} start 5 on host another-host since x")
    # The named holder is gone but what it started still holds the folder: waited for, then refused.
    from commbench.runfolder import lock

    monkeypatch.setattr(lock, "DEAD_HOLDER_WAIT_S", 0.5)
    (run / LOCK_NAME).write_text(f"pid {dead.stdout.strip()} start 5 on host {host} since x\n")
    with pytest.raises(RunFolderBusy, match="dead run left behind"):
        FolderLock(run).acquire()
    proc.kill()
    proc.wait()
    taken = FolderLock(run).acquire()   # its last descriptor closed: taken over
    assert f"pid {os.getpid()}" in (run / LOCK_NAME).read_text()
    taken.release()


# -- item 7: --resume repairs first -----------------------------------------------------------------

def test_resume_repair_drops_non_utf8_lines_before_anything_is_measured(tmp_path):
    f = _run_folder(tmp_path)
    f.append_samples([sample("b", i) for i in range(2)])
    with open(tmp_path / "results.jsonl", "ab") as fh:
        fh.write(b'{"case_id": "b", "status": "ok", "size_bytes": 8, "time_us": 1.0, "reason": "\xff\xfe"}\n')
    f2 = RunFolder(tmp_path)
    f2.claim(resume=True)
    f2.repair()
    assert f2.done_case_ids() == {"a"}   # b's row was damaged: b is measured again
    (tmp_path / "results.jsonl").read_bytes().decode("utf-8")
    f2.release()
    assert list(load(tmp_path)["case_id"]) == ["a"]   # the reader accepts what --resume continues


def test_resume_repair_measures_again_a_case_with_a_non_utf8_sample(tmp_path):
    f = _run_folder(tmp_path)
    f.append_samples([sample("b", i) for i in range(2)])
    f.append_row(row("b"))
    data = (tmp_path / "samples.csv").read_bytes().replace(b"b,0,h,cpu", b"b,0,\xff,cpu")
    (tmp_path / "samples.csv").write_bytes(data)
    f2 = RunFolder(tmp_path)
    f2.claim(resume=True)
    f2.repair()
    assert f2.done_case_ids() == {"a"}
    f2.release()
    rows = list(csv.DictReader(io.StringIO((tmp_path / "samples.csv").read_bytes().decode("utf-8"))))
    assert {r["case_id"] for r in rows} == {"a"}


def test_resume_measures_again_the_cases_whose_samples_are_gone(tmp_path):
    f = _run_folder(tmp_path)
    f.append_samples([sample("b", i) for i in range(2)])
    f.append_row(row("b"))
    f.append_row(row("s", "skipped"))   # no samples by nature
    (tmp_path / "samples.csv").unlink()
    f2 = RunFolder(tmp_path)
    f2.claim(resume=True)
    f2.repair()
    assert f2.done_case_ids() == {"s"}
    f2.append_samples([sample("a", i) for i in range(2)])
    f2.append_row(row("a"))   # measured again: done
    assert f2.done_case_ids() == {"a", "s"}
    f2.release()


@needs_mpi
def test_a_resume_after_samples_were_deleted_leaves_no_ok_row_without_samples(tmp_path):
    suite = tmp_path / "g.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "commbench", "run", str(suite), "--out", str(out), "--quiet"]
    first = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    (out / "samples.csv").unlink()
    again = subprocess.run(cmd + ["--resume"], env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    run = load_run(out)
    ok = set(run.results.loc[run.results["status"] == "ok", "case_id"])
    assert ok and ok <= set(run.samples["case_id"])
    assert len(list(csv.DictReader(open(out / "results.csv")))) == len(ok)
