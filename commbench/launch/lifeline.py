"""Ranks die with the `commbench run` that started them (Linux; elsewhere nothing is armed).

Two mechanisms, because either alone has a gap:
- the launcher (mpiexec/srun) gets a parent-death signal: when commbench dies, even by SIGKILL,
  the kernel sends it SIGTERM, and it takes down the ranks it started;
- every rank on commbench's host watches commbench's pid (with its start time, so a reused pid is
  not mistaken for it) and exits with PARENT_GONE_EXIT once it is gone, whatever the launcher did.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from typing import Mapping

from .. import procs

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
