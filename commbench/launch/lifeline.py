"""Launches die with the `commbench run` that started them (Linux; elsewhere nothing is armed).

Every launch attempt runs in a session of its own, its processes marked by ATTEMPT_VAR (see
launch/keeper.py for what its processes are). Several mechanisms, because each alone has a gap:
- the launcher (mpiexec/srun) gets a parent-death signal: when commbench dies, even by SIGKILL,
  the kernel sends it SIGTERM, and it takes down the ranks it started (a launcher stuck on a hung
  host may not);
- the keeper (launch/keeper.py), a small process of its own session that the run tells which
  launches run, sees the run's end on its stdin however the run ends and stops every process of
  the launches still listed (SIGTERM to the launcher, then SIGKILL to all that is left);
- an exit of the run through Python (an error, sys.exit, the end of an interrupt) stops them at
  once (atexit), and supervise.py stops a launch's leftovers whenever its launcher exits, even one
  killed by someone else, before the launch can start again;
- every rank on commbench's host watches commbench's pid (with its start time, so a reused pid is
  not mistaken for it) and exits with PARENT_GONE_EXIT once it is gone, whatever the launcher did.
"""
from __future__ import annotations

import atexit
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Mapping

from .. import procs
from ..runfolder.writers_lock import ATTEMPT_VAR
from .keeper import end_launches

PARENT_VAR = "COMMBENCH_PARENT"   # "host pid start-time" of the commbench that launched the ranks
PARENT_GONE_EXIT = 86              # a rank's exit status when its commbench went away
_PR_SET_PDEATHSIG = 1


def parent_token() -> str:
    """What the ranks are told about this process (PARENT_VAR's value)."""
    return f"{socket.gethostname()} {os.getpid()} {procs.start_ticks(os.getpid()) or '-'}"


def alive(token: str) -> bool:
    """Whether the process named by a parent_token still runs (a reused pid is not it)."""
    try:
        _host, pid, started = token.split()
    except ValueError:
        return True
    if not pid.isdigit() or not (started == "-" or started.isdigit()):
        return False
    return procs.runs(int(pid), None if started == "-" else int(started))


def watch_parent(env: Mapping[str, str] | None = None, interval_s: float = 0.5) -> bool:
    """In a rank: a daemon thread that ends this process (os._exit(PARENT_GONE_EXIT)) once the
    commbench that launched it is gone. Armed only on commbench's own host, where its pid means
    something; returns whether it was armed."""
    token = (os.environ if env is None else env).get(PARENT_VAR, "")
    if not token or not os.path.exists("/proc/self/stat") or token.split()[0] != socket.gethostname():
        return False

    def watch() -> None:
        while alive(token):
            time.sleep(interval_s)
        print(f"commbench: the commbench run that launched this rank ({token}) is gone; rank exits",
              file=sys.stderr, flush=True)
        os._exit(PARENT_GONE_EXIT)

    threading.Thread(target=watch, name="commbench-parent-watch", daemon=True).start()
    return True


def die_with_parent_hook():
    """A Popen preexec_fn that asks the kernel for SIGTERM when the parent dies (Linux prctl),
    or None where there is no prctl. Runs in the child between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:   # the parent died before the signal was armed
            os._exit(PARENT_GONE_EXIT)

    return hook


def attempt_value(launch_id: int, attempt: int) -> str:
    """ATTEMPT_VAR's value for one attempt of a launch: unique to it (this run's pid and a nonce)."""
    return f"{int(launch_id)} {int(attempt)} {os.getpid()}.{secrets.token_hex(6)}"


class _Live:
    """The launches of this process that run now, mirrored to the keeper."""

    def __init__(self):
        self.lock = threading.Lock()
        self.launches: dict[int, str] = {}
        self.keeper: subprocess.Popen | None = None
        self.armed = False

    def tell(self, line: str) -> None:
        """Send the keeper a line (start it, or start it again, when needed); never raises."""
        for _ in range(2):
            if self.keeper is None or self.keeper.poll() is not None:
                self.keeper = _start_keeper()
                if self.keeper is None:
                    return
                line = "".join(f"+ {sid} {m}\n" for sid, m in self.launches.items())
            try:
                self.keeper.stdin.write(line.encode())
                self.keeper.stdin.flush()
                return
            except (OSError, ValueError):
                self.keeper = None


_LIVE = _Live()


def _start_keeper(stderr=None) -> subprocess.Popen | None:
    """The keeper, in a session of its own, the signals it ignores ignored from before its exec."""
    try:
        return subprocess.Popen([sys.executable, "-m", "commbench.launch.keeper", ATTEMPT_VAR],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr,
                                close_fds=True, start_new_session=True, preexec_fn=_deaf)
    except OSError:
        return None


def _deaf() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def track(sid: int, marker: str) -> None:
    """A launch (launcher pid = session id, ATTEMPT_VAR value) started: end it with this process."""
    with _LIVE.lock:
        _LIVE.launches[sid] = marker
        if not _LIVE.armed:
            atexit.register(end_live)
            _LIVE.armed = True
        _LIVE.tell(f"+ {sid} {marker}\n")


def untrack(sid: int) -> None:
    """The launch whose launcher was ``sid`` ended and nothing of it is left."""
    with _LIVE.lock:
        if _LIVE.launches.pop(sid, None) is not None:
            _LIVE.tell(f"- {sid}\n")


def end_live(grace_s: float = 1.0) -> None:
    """Stop every launch of this process still running (at its exit)."""
    with _LIVE.lock:
        launches = list(_LIVE.launches.items())
    if launches:
        end_launches(launches, ATTEMPT_VAR, grace_s=grace_s)
        for sid, _marker in launches:
            untrack(sid)


def end_attempt(proc: subprocess.Popen, marker: str, grace_s: float) -> int:
    """Stop a launch attempt's process tree (the launcher first, then whatever is left of it)
    and reap its launcher; the number of processes that had to be killed."""
    killed, _alive = end_launches([(proc.pid, marker)], ATTEMPT_VAR, grace_s=grace_s)
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        pass
    return killed
