"""Whether a process of this host still runs, told by its pid and its start time (so a pid the
kernel gave to a newer process is not taken for it). Used by the run folder's lock (is the
recorded holder alive?) and by the ranks' watch on the commbench that launched them."""
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
