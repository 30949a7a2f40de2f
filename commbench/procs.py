"""Whether a process of this host still runs, told by its pid and its start time (so a pid the
kernel gave to a newer process is not taken for it), and which processes belong to a launch (its
session, or an environment marker). Used by the run folder's lock (is the recorded holder alive?),
by the ranks' watch on the commbench that launched them, and by whatever ends a launch."""
from __future__ import annotations

import os
from pathlib import Path


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), or None when
    there is no such live process (a zombie counts as gone) or no /proc to ask."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def runs(pid: int, started: int | None = None) -> bool:
    """Whether process ``pid`` runs and, when ``started`` (its start_ticks) is given, is the one
    that started then. Without /proc only the pid is asked for (a signal 0)."""
    if not os.path.exists("/proc/self/stat"):
        return _pid_exists(pid)
    now = start_ticks(pid)
    return now is not None and (started is None or now == started)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True   # it exists, owned by someone else
    return True


def _proc_pids() -> list[int]:
    """Every pid /proc lists (Linux; elsewhere none)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    return [int(n) for n in names if n.isdigit()]


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command: state, ppid, pgrp, session, ... (None: gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid`` on this host, read from /proc."""
    out = []
    for pid in _proc_pids():
        fields = _stat_fields(pid)
        if fields and len(fields) > 3 and fields[3] == str(sid) and fields[0] not in ("Z", "X"):
            out.append(pid)
    return out


def marked(var: str, value: str) -> list[int]:
    """Live processes of this host whose environment (as they started) holds ``var=value``: what
    a launch set for its launcher reaches every process under it, also those that left its session
    (a daemon that called setsid). Processes of other users cannot be read and are not listed."""
    needle = f"{var}={value}".encode()
    me, out = os.getpid(), []
    for pid in _proc_pids():
        if pid == me:
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0") and start_ticks(pid) is not None:
            out.append(pid)
    return out


def kill_all(pids: list[int]) -> None:
    """SIGKILL each of ``pids`` (also ends a stopped process); one that is gone is skipped."""
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
