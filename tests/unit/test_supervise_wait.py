"""The supervisor sees a launcher's exit when it happens (pidfd), not a poll interval later."""
import subprocess
import sys
import time

from commbench.launch import supervise


def test_an_exit_ends_the_wait_at_once():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    t0 = time.monotonic()
    supervise._wait_exit(proc, 10.0)
    assert time.monotonic() - t0 < 5.0 and proc.poll() == 0


def test_a_running_launcher_waits_the_whole_interval():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        t0 = time.monotonic()
        supervise._wait_exit(proc, 0.3)
        assert 0.25 <= time.monotonic() - t0 < 5.0 and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
