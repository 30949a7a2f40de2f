"""One appender at a time inside a run folder shared by the launches of a wave.

Each launch of a wave has a rank 0 that appends rows, samples, timeline lines and trace lines to
the same folder. An append that reads the file first (is there a header yet? is the last line
whole?) and then writes must not interleave with another: ``one_writer`` serialises them with an
flock on the folder's logs/ directory (the folder's own directory carries the run's lock,
lock.py). A folder written by one process alone (``shared`` false) skips it. Where the folder has
no logs/ or the filesystem has no flock, appends go unserialised, as they did before.
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

# Set to 1 by the launch for the ranks of a wave whose launches run at the same time: their rank 0s
# share the folder, so each append takes the lock (a launch alone writes it by itself).
SHARED_VAR = "COMMBENCH_SHARED_FOLDER"


def shared_from_env() -> bool:
    return os.environ.get(SHARED_VAR) == "1"


@contextmanager
def one_writer(folder: Path, shared: bool | None = None):
    """Hold the folder's writers lock for the block when ``shared`` (None: as SHARED_VAR says)."""
    if shared is None:
        shared = shared_from_env()
    if not shared:
        yield
        return
    try:
        fd = os.open(Path(folder) / "logs", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
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
