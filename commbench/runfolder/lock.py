"""One writer per run folder: an advisory lock on RUN/.commbench.lock that names its holder.

The lock is the kernel's (flock), so a holder that died released it with its last file
descriptor: a stale lock file is simply taken over, never mistaken for a live run. The file is
never removed (removing a lock file races with a second process opening it). The launcher keeps
a descriptor open while its ranks run, so ranks left behind by a killed parent still hold it.
"""
from __future__ import annotations

import errno
import fcntl
import os
import socket
from datetime import datetime, timezone
from pathlib import Path

from ..errors import CommbenchError, preview

LOCK_NAME = ".commbench.lock"


class RunFolderBusy(CommbenchError):
    """Another run (or --resume) writes this folder now."""


class FolderLock:
    """Held from ``acquire`` to ``release`` (or the end of the process and its launches)."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / LOCK_NAME
        self.fd: int | None = None
        self.previous = ""   # what a holder that is gone left in the file

    def acquire(self) -> "FolderLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read(fd)
            os.close(fd)
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP):   # a filesystem without locks
                return self
            raise RunFolderBusy(
                f"{self.path.parent} is being written by another commbench run ({holder or 'holder unknown'}; "
                f"lock {self.path}): wait for it to end or stop it; two runs in one folder would measure "
                f"Cases twice and interleave their samples") from None
        self.previous = _read(fd)
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()} since {stamp}\n".encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)   # closing drops the flock; launches holding a copy keep it until they end
            self.fd = None


def _read(fd: int) -> str:
    try:
        return preview(os.pread(fd, 200, 0).decode("utf-8", "replace").strip(), 120, quote=False)
    except OSError:
        return ""
