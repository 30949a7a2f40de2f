"""A `commbench run` killed with SIGKILL takes its launcher and ranks with it (launch/lifeline.py),
run.json keeps the launch it had started, and `--resume` can take the folder over."""
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
from commbench.launch import lifeline
from tests.conftest import needs_mpi

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def test_a_reused_pid_is_not_the_parent():
    me = lifeline.parent_token()
    assert lifeline.alive(me)
    host, pid, started = me.split()
    assert not lifeline.alive(f"{host} {pid} {int(started) + 1}")   # same pid, another process
    assert not lifeline.alive(f"{host} 999999999 {started}")


def test_a_zombie_is_gone_for_the_lock_and_the_lifeline_alike():
    """One check of whether a process runs (commbench/procs.py): a process that exited but was not
    reaped yet is gone for the ranks' watch and for the run folder's lock."""
    import socket

    from commbench.runfolder.lock import holder_alive

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    started = procs.start_ticks(child.pid)   # while it runs; then it exits, not reaped
    child.stdin.close()
    for _ in range(200):
        if Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.05)
    try:
        host = socket.gethostname()
        assert started is not None
        assert not procs.runs(child.pid, started) and not procs.runs(child.pid)
        assert not lifeline.alive(f"{host} {child.pid} {started}")
        assert not holder_alive(f"pid {child.pid} start {started} on host {host} since x")
        assert procs.runs(os.getpid(), procs.start_ticks(os.getpid()))
    finally:
        child.wait()


def test_a_rank_exits_when_its_parent_is_gone():
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        host, _pid, _started = lifeline.parent_token().split()
        token = f"{host} {parent.pid} {procs.start_ticks(parent.pid)}"
        rank = subprocess.Popen([sys.executable, "-c",
                                 "import time; from commbench.launch import lifeline\n"
                                 "assert lifeline.watch_parent(interval_s=0.1)\ntime.sleep(60)"],
                                env={**os.environ, lifeline.PARENT_VAR: token})
        time.sleep(1.0)
        assert rank.poll() is None
        parent.kill()
        parent.wait()
        assert rank.wait(timeout=20) == lifeline.PARENT_GONE_EXIT
    finally:
        parent.kill()


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid):
            out.append(int(stat.parent.name))
    return out


def _live(pids) -> list[int]:
    return [p for p in pids if procs.start_ticks(p) is not None]


@needs_mpi
def test_sigkill_of_run_leaves_no_rank_and_resume_takes_over(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(textwrap.dedent("""\
        name: s
        defaults: {ranks: 2, warmup: 0, iters: 1, sizes: [8B], timeout_s: 15}
        benchmarks:
          - {name: h, family: harness, backends: [mpi], ops: [hang]}
        """))
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "commbench", "run", str(suite), "--out", str(out), "--quiet"]
    run = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 120
        ranks = []
        while time.time() < deadline:   # the Case has started on both ranks
            ranks = [int(p.read_text().split()[1]) for p in (out / "logs").glob("launch-*.rank*.pid")
                     if p.read_text().strip()] if (out / "logs").exists() else []
            progress = list((out / "logs").glob("*.progress.jsonl")) if (out / "logs").exists() else []
            if len(ranks) == 2 and any('"start"' in p.read_text() for p in progress):
                break
            time.sleep(0.2)
        assert len(ranks) == 2 and run.poll() is None
        launcher = _children(run.pid)
        assert launcher and len(_live(ranks)) == 2
        run.kill()
        run.wait()
        deadline = time.time() + 20
        while _live(ranks + launcher) and time.time() < deadline:
            time.sleep(0.2)
        assert not _live(ranks + launcher), "ranks or launcher outlived the killed run"
    finally:
        for pid in _live(ranks + _children(run.pid)):
            os.kill(pid, signal.SIGKILL)
    launches = json.loads((out / "run.json").read_text())["launches"]
    assert [l["status"] for l in launches] == ["running"]   # recorded when it started
    resumed = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=180)
    assert "being written by another" not in resumed.stdout + resumed.stderr
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in rows] == ["timeout"], resumed.stdout + resumed.stderr
