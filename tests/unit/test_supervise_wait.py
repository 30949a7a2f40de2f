"""The supervisor sees a launcher's exit when it happens (pidfd), not a poll interval later, and
opens that pidfd once per launcher, not at every poll."""
import os
import subprocess
import sys
import time

import pytest

from commbench.launch import supervise


def test_an_exit_ends_the_wait_at_once():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    t0 = time.monotonic()
    with supervise.ExitWatch(proc) as watch:
        watch.wait(10.0)
    assert time.monotonic() - t0 < 5.0 and proc.wait(timeout=5) == 0


def test_a_running_launcher_waits_the_whole_interval():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        t0 = time.monotonic()
        with supervise.ExitWatch(proc) as watch:
            watch.wait(0.3)
        assert 0.25 <= time.monotonic() - t0 < 5.0 and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no pidfd on this system")
def test_one_pidfd_per_launcher_however_many_polls(tmp_path, monkeypatch):
    opened, real = [], os.pidfd_open
    monkeypatch.setattr(os, "pidfd_open", lambda pid, *a: opened.append(pid) or real(pid, *a))
    monkeypatch.setattr(supervise, "POLL_S", 0.02)
    polls, real_wait = [], supervise.ExitWatch.wait
    monkeypatch.setattr(supervise.ExitWatch, "wait", lambda self, t: polls.append(t) or real_wait(self, t))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.6)"])
    task = {"launch_id": 0, "case_ids": ["a"]}
    with open(tmp_path / "log", "w") as log:
        out = supervise._supervise(proc, tmp_path / "progress.jsonl", 0, task, {"a": 60.0},
                                   lambda ev: None, tmp_path, log, [], [])
    assert out == (None, None) and proc.returncode == 0
    assert len(polls) >= 5 and opened == [proc.pid], (len(polls), opened)   # not one pidfd per poll
