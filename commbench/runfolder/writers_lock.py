"""One appender at a time inside a run folder shared by the launches of a wave, and only the
current attempt of a launch appending at all.

Each launch of a wave has a rank 0 that appends rows, samples, timeline lines and trace lines to
the same folder. An append that reads the file first (is there a header yet? is the last line
whole?) and then writes must not interleave with another: ``one_writer`` serialises them with an
flock on the folder's logs/ directory (the folder's own directory carries the run's lock,
lock.py). A folder written by one process alone (``shared`` false) skips it. Where the folder has
no logs/ or the filesystem has no flock, appends go unserialised, as they did before.

The attempt fence: every launch attempt's processes carry ATTEMPT_VAR ("<launch> <attempt>
<token>"), and the parent writes the attempt it runs now into ``logs/launch-<launch>.attempt``
before starting it (and empties it when it ended). Inside a rank, ``one_writer`` always takes the
lock and compares the two: an attempt that is no longer the current one (its launcher was killed
and the launch started again, a rank left behind on another host) raises AttemptSuperseded before
it writes a byte, so two attempts never measure into one folder.
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from ..errors import CommbenchError, preview
from . import files

# Set to 1 by the launch for the ranks of a wave whose launches run at the same time: their rank 0s
# share the folder, so each append takes the lock (a launch alone writes it by itself).
SHARED_VAR = "COMMBENCH_SHARED_FOLDER"
# "<launch_id> <attempt> <token>", set by the launch for every process of one attempt; also the
# marker by which whatever ends a launch finds its processes (launch/lifeline.py).
ATTEMPT_VAR = "COMMBENCH_ATTEMPT"


class AttemptSuperseded(CommbenchError):
    """This launch attempt is no longer the current one: it must not write the folder."""


def shared_from_env() -> bool:
    return os.environ.get(SHARED_VAR) == "1"


def attempt_from_env(env=None) -> tuple[int, int, str] | None:
    """(launch id, attempt, the whole value) of ATTEMPT_VAR, or None outside a launch attempt."""
    value = (os.environ if env is None else env).get(ATTEMPT_VAR, "")
    parts = value.split()
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1]), value


def fence_name(launch_id: int) -> str:
    return f"logs/launch-{int(launch_id)}.attempt"


def set_current_attempt(folder: Path, launch_id: int, value: str) -> None:
    """The parent: make ``value`` (an ATTEMPT_VAR value, or "" for none) the attempt of
    ``launch_id`` allowed to write; waits for an append in progress to end."""
    with _flocked(folder):
        files.write_atomic(folder, fence_name(launch_id), value.encode())


def _check_current(folder: Path, fence: tuple[int, int, str]) -> None:
    launch_id, attempt, value = fence
    try:
        current = files.read_bytes(folder, fence_name(launch_id), 4096).decode("utf-8", "replace").strip()
    except FileNotFoundError:
        current = ""
    if current != value:
        now = f"attempt {current.split()[1]} is" if len(current.split()) == 3 else "no attempt is"
        raise AttemptSuperseded(
            f"launch {launch_id} attempt {attempt} is superseded ({now} current in "
            f"{Path(folder) / fence_name(launch_id)}): it writes nothing more to {folder}; "
            f"this process should have been stopped with its launch (was {preview(value, 80)})")


@contextmanager
def _flocked(folder: Path):
    try:
        fd = os.open(Path(folder) / "logs", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)   # closing drops the flock


@contextmanager
def one_writer(folder: Path, shared: bool | None = None):
    """Hold the folder's writers lock for the block when ``shared`` (None: as SHARED_VAR says) or
    inside a launch attempt (ATTEMPT_VAR set), whose currency is checked first (AttemptSuperseded)."""
    fence = attempt_from_env()
    if shared is None:
        shared = shared_from_env()
    if not shared and fence is None:
        yield
        return
    with _flocked(folder):
        if fence is not None:
            _check_current(Path(folder), fence)
        yield
