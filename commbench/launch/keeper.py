"""Ending a launch's processes, and the keeper that does it when `commbench run` cannot.

A launch is started in a session of its own (its launcher is the session leader) with a marker in
its environment (runfolder/writers_lock.ATTEMPT_VAR, one value per attempt). Its processes are
every live process of that session on this host plus every one whose environment carries the
marker: Open MPI's prterun puts each rank in a process group of its own (a signal to the
launcher's group misses them) and a rank outlives a launcher killed by SIGKILL; a daemon that left
the session still carries the marker.

``end_launches`` stops them: SIGTERM to each launcher's group first (its own way of stopping its
daemons and ranks, remote ones included), then, once the launcher is gone or ``grace_s`` passed,
SIGKILL to every process left, until none is.

The keeper (``python -m commbench.launch.keeper VAR``) is one small process per `commbench run`,
in a session of its own and deaf to SIGINT, SIGTERM and SIGHUP. The run tells it on its stdin
which launches run now (``+ SID MARKER`` when one starts, ``- SID`` when it ended). Its stdin
reaches end of file when the run ends, however it ends (SIGKILL included); it then ends every
launch still listed, and exits. It imports nothing but the standard library and commbench.procs.
"""
from __future__ import annotations

import os
import signal
import sys
import time

from .. import procs

GRACE_S = 3.0      # a launcher's time to stop its own daemons and ranks after SIGTERM
GONE_WAIT_S = 10.0  # how long SIGKILL is repeated on what is left before giving up
POLL_S = 0.05


def launch_processes(sid: int, var: str, marker: str) -> list[int]:
    """The live processes of one launch attempt on this host: its session and its marker."""
    return sorted(set(procs.session_members(sid)) | set(procs.marked(var, marker)))


def end_launches(launches: list[tuple[int, str]], var: str, grace_s: float = GRACE_S,
                 wait_s: float = GONE_WAIT_S) -> tuple[int, list[int]]:
    """Stop every process of the launches ``(launcher pid = session id, marker)``; returns (how
    many processes were left once the launchers were gone and got SIGKILL, the pids still alive
    after ``wait_s``: empty unless a process cannot be killed, one in uninterruptible sleep)."""
    me = os.getpid()
    for sid, _marker in launches:
        try:
            os.killpg(sid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(procs.runs(sid) for sid, _m in launches):
        time.sleep(POLL_S)
    killed: set[int] = set()
    deadline = time.monotonic() + wait_s
    while True:
        left = sorted({p for sid, m in launches for p in launch_processes(sid, var, m)} - {me})
        if not left or time.monotonic() > deadline:
            return len(killed), left
        killed |= set(left)
        procs.kill_all(left)
        time.sleep(POLL_S)


def serve(lines, var: str) -> list[tuple[int, str]]:
    """The launches still running when ``lines`` (the run's messages) ended."""
    live: dict[int, str] = {}
    for raw in lines:
        parts = raw.decode("utf-8", "replace").rstrip("\n").split(" ", 2)
        if len(parts) == 3 and parts[0] == "+" and parts[1].isdigit():
            live[int(parts[1])] = parts[2]
        elif len(parts) == 2 and parts[0] == "-" and parts[1].isdigit():
            live.pop(int(parts[1]), None)
    return list(live.items())


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)   # a Ctrl-C or a stop meant for the run is the run's
    var = argv[0]
    left = serve(sys.stdin.buffer, var)   # until the run ends, however it ends
    if left:
        killed, alive = end_launches(left, var)
        print(f"commbench keeper: the run ended with {len(left)} launch(es) running; stopped them"
              f" ({killed} process(es) killed{f', {len(alive)} still alive: {alive}' if alive else ''})",
              file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
