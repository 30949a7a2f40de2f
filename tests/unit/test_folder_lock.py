"""The run folder's lock (runfolder/lock.py): one writer per folder, naming the holder; a stale lock
file blocks nothing, deleting the lock file lets no second writer in, readers refuse a folder a
live run writes, and a dead holder is told apart from a live one."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.runfolder import RunFolder
from commbench.runfolder.lock import LOCK_NAME, FolderLock, RunFolderBusy, holder_alive, writer_holding
from commbench.runfolder.reader import load

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "runs" / "cpu-base"


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


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


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True,
                              env=_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderBusy) as info:
            FolderLock(run).acquire()
        assert f"pid {holder.pid}" in str(info.value)
        suite = tmp_path / "s.yaml"
        suite.write_text("name: s\nbenchmarks: [{name: b, family: harness, ops: [barrier], ranks: 2}]\n")
        result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(run), "--resume", "--quiet"])
        assert result.exit_code == 2, result.output
        assert "being written by another commbench run" in result.output and f"pid {holder.pid}" in result.output
        assert not (run / "results.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    # the holder died: its lock went with it, the file it left is taken over
    lock = FolderLock(run).acquire()
    assert f"pid {holder.pid}" in lock.previous and f"pid {os.getpid()}" in (run / LOCK_NAME).read_text()
    lock.release()


def test_a_stale_lock_file_does_not_block_a_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_NAME).write_text("pid 999999 on host gone since 2020-01-01T00:00:00+00:00\n")
    folder = RunFolder(run)
    folder.claim(resume=False)            # only a lock file: the folder counts as empty
    assert "999999" in folder._lock.previous
    folder.release()
