"""A launch's processes end with the `commbench run` that started them, however it ends, and with
their launcher (launch/lifeline.py, launch/keeper.py); a superseded launch attempt writes nothing
more to the run folder (runfolder/writers_lock.py). The MPI tests use the real mpiexec (Open MPI's
prterun puts every rank in a process group of its own, and its ranks outlive a launcher killed with
SIGKILL: these tests show both)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from commbench import procs
from commbench.launch import keeper, lifeline
from commbench.runfolder import RunFolder
from commbench.runfolder.writers_lock import (ATTEMPT_VAR, AttemptSuperseded, attempt_from_env,
                                              set_current_attempt)
from tests.conftest import needs_mpi

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

RANK = "import time; time.sleep(120)"
# A stand-in for `commbench run`: starts one real launch as supervise.py does (its own session, the
# parent-death signal, the marker, the keeper), says so, and waits to be killed.
FAKE_RUN = textwrap.dedent("""\
    import os, signal, subprocess, sys, time
    from commbench import procs
    from commbench.launch import lifeline
    from commbench.launch.mpiexec import launcher_argv
    from commbench.runfolder.writers_lock import ATTEMPT_VAR
    marker, stop = sys.argv[1], sys.argv[2] == "stop"
    argv = launcher_argv(2, 2, [ATTEMPT_VAR]) + [sys.executable, "-c", %r]
    proc = subprocess.Popen(argv, env={**os.environ, ATTEMPT_VAR: marker}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lifeline.die_with_parent_hook())
    lifeline.track(proc.pid, marker)
    deadline = time.time() + 60
    while len(procs.marked(ATTEMPT_VAR, marker)) < 3 and time.time() < deadline:
        time.sleep(0.1)   # the launcher and both ranks run
    if stop:   # a launcher that answers no SIGTERM (one waiting on a hung host)
        os.kill(proc.pid, signal.SIGSTOP)
    print(proc.pid, flush=True)
    time.sleep(120)
    """ % RANK)


def _gone_within(pids_of, seconds: float) -> list[int]:
    deadline = time.time() + seconds
    while (left := pids_of()) and time.time() < deadline:
        time.sleep(0.1)
    return left


def _keepers_of(pid: int) -> list[int]:
    out = []
    for p in procs._proc_pids():
        try:
            stat = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{p}/cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if stat[1] == str(pid) and b"commbench.launch.keeper" in cmd:
            out.append(p)
    return out


@needs_mpi
@pytest.mark.parametrize("sig,stop", [(signal.SIGKILL, False), (signal.SIGTERM, False), (signal.SIGINT, False),
                                      (signal.SIGKILL, True)], ids=["sigkill", "sigterm", "sigint",
                                                                    "sigkill-launcher-stopped"])
def test_a_launch_ends_with_its_run_however_the_run_ends(sig, stop):
    marker = lifeline.attempt_value(0, 0)
    run = subprocess.Popen([sys.executable, "-c", FAKE_RUN, marker, "stop" if stop else "go"],
                           stdout=subprocess.PIPE, text=True, start_new_session=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))   # as in a terminal
    try:
        launcher = int(run.stdout.readline())
        keepers = _keepers_of(run.pid)
        before = procs.marked(ATTEMPT_VAR, marker)
        assert launcher in before and len(before) >= 3, "the launcher and its two ranks carry the marker"
        assert len(keepers) == 1
        os.kill(run.pid, sig)
        run.wait(timeout=30)
        # a stopped launcher gets keeper.GRACE_S for SIGTERM before everything gets SIGKILL
        left = _gone_within(lambda: procs.marked(ATTEMPT_VAR, marker), keeper.GRACE_S + 15)
        assert not left, f"processes of the launch outlived the run killed with {sig!r}: {left}"
        assert not _gone_within(lambda: [k for k in keepers if procs.runs(k)], 15), "the keeper stayed"
    finally:
        run.kill()
        procs.kill_all(procs.marked(ATTEMPT_VAR, marker))


@needs_mpi
def test_the_ranks_of_a_killed_launcher_run_on_until_the_attempt_is_ended():
    from commbench.launch.mpiexec import launcher_argv

    marker = lifeline.attempt_value(3, 1)
    argv = launcher_argv(2, 2, [ATTEMPT_VAR]) + [sys.executable, "-c", RANK]
    proc = subprocess.Popen(argv, env={**os.environ, ATTEMPT_VAR: marker}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while len(procs.marked(ATTEMPT_VAR, marker)) < 3 and time.time() < deadline:
            time.sleep(0.1)
        ranks = [p for p in procs.marked(ATTEMPT_VAR, marker) if p != proc.pid]
        assert len(ranks) == 2
        groups = {int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[2]) for p in ranks}
        assert proc.pid not in groups, "prterun put its ranks in process groups of their own"
        proc.kill()
        proc.wait()
        time.sleep(0.5)
        assert all(procs.runs(p) for p in ranks), "a killed prterun leaves its ranks running"
        assert lifeline.end_attempt(proc, marker, grace_s=0.0) == 2
        assert not procs.marked(ATTEMPT_VAR, marker)
    finally:
        procs.kill_all(procs.marked(ATTEMPT_VAR, marker))


def test_the_keeper_ends_what_it_was_told_of_when_its_input_ends():
    marker = lifeline.attempt_value(1, 0)
    child = subprocess.Popen([sys.executable, "-c", RANK], env={**os.environ, ATTEMPT_VAR: marker},
                             start_new_session=True)
    gone = subprocess.Popen([sys.executable, "-c", RANK], start_new_session=True)
    keep = lifeline._start_keeper(stderr=subprocess.PIPE)
    try:
        keep.stdin.write(f"+ {child.pid} {marker}\n+ {gone.pid} x y z\n- {gone.pid}\n".encode())
        keep.stdin.flush()
        keep.send_signal(signal.SIGTERM)   # deaf to the signals meant for the run
        time.sleep(0.3)
        assert keep.poll() is None
        keep.stdin.close()
        assert keep.wait(timeout=20) == 0
        assert child.wait(timeout=5) == -signal.SIGTERM
        assert gone.poll() is None, "a launch told to be over is not touched"
        assert b"1 launch(es) running" in keep.stderr.read()
    finally:
        for p in (child, gone, keep):
            p.kill()


def _fenced(monkeypatch, tmp_path: Path, launch_id: int, attempt: int) -> str:
    value = lifeline.attempt_value(launch_id, attempt)
    monkeypatch.setenv(ATTEMPT_VAR, value)
    return value


def _row(case_id: str) -> dict:
    return {"case_id": case_id, "status": "ok", "time_us": 1.0, "size_bytes": 8}


def test_the_current_attempt_writes_and_its_rows_carry_it(monkeypatch, tmp_path):
    (tmp_path / "logs").mkdir()
    value = _fenced(monkeypatch, tmp_path, 4, 2)
    assert attempt_from_env() == (4, 2, value)
    set_current_attempt(tmp_path, 4, value)
    folder = RunFolder(tmp_path)
    folder.append_samples([{"case_id": "a", "rank": 0, "host": "h", "gpu": 0, "iteration": 0, "time_us": 1.0}])
    folder.append_row(_row("a"))
    assert json.loads((tmp_path / "results.jsonl").read_text())["attempt"] == 2


@pytest.mark.parametrize("current", ["next", "ended"])
def test_a_superseded_attempt_writes_nothing(monkeypatch, tmp_path, current):
    (tmp_path / "logs").mkdir()
    old = _fenced(monkeypatch, tmp_path, 4, 2)
    set_current_attempt(tmp_path, 4, old)
    folder = RunFolder(tmp_path)
    folder.append_row(_row("a"))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    set_current_attempt(tmp_path, 4, lifeline.attempt_value(4, 3) if current == "next" else "")
    with pytest.raises(AttemptSuperseded, match="launch 4 attempt 2 is superseded"):
        folder.append_samples([{"case_id": "b", "rank": 0, "host": "h", "gpu": 0, "iteration": 0, "time_us": 1.0}])
    with pytest.raises(AttemptSuperseded):
        folder.append_row(_row("b"))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_the_parent_writes_without_a_fence(monkeypatch, tmp_path):
    monkeypatch.delenv(ATTEMPT_VAR, raising=False)
    (tmp_path / "logs").mkdir()
    set_current_attempt(tmp_path, 0, "")   # no attempt runs: the parent still stores settled rows
    RunFolder(tmp_path).append_row(_row("a"))
    assert "attempt" not in json.loads((tmp_path / "results.jsonl").read_text())
