"""One writer per run folder: an advisory lock on the folder itself, named in RUN/.commbench.lock.

The lock is the kernel's ``flock`` on the run folder's own directory (a descriptor held for the
whole run): deleting or replacing ``.commbench.lock`` cannot release it, a second writer is
refused even then. The lock file only says who holds it (pid, the pid's start time, host, since
when) and is flocked too, for commbench versions that checked only the file. A holder that died
released both with its last descriptor. The launcher keeps both descriptors open while its ranks
run, so ranks left behind by a killed parent still hold the folder; a --resume that finds the
named holder dead waits a little for them to end (their watchdog stops them) before refusing.

Readers (report, compare, accept, trace) call ``writer_holding`` and refuse a folder a live run
still writes; the process holding the lock (a run's own summary and report) reads freely.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

from .. import procs
from ..errors import CommbenchError, preview

LOCK_NAME = ".commbench.lock"
DEAD_HOLDER_WAIT_S = 10.0   # how long a dead holder's ranks get to end before a --resume gives up
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP)   # a filesystem without flock
_HOLDER = re.compile(r"pid (\d+)(?: start (\d+))? on host (\S+)")
_HELD: set[tuple[int, int]] = set()   # (device, inode) of the folders this process holds


class RunFolderBusy(CommbenchError):
    """Another run (or --resume) writes this folder now."""


class FolderLock:
    """Held from ``acquire`` to ``release`` (or the end of the process and its launches)."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / LOCK_NAME
        self.fd: int | None = None       # the lock file (who holds it)
        self.dir_fd: int | None = None   # the folder itself (what is locked)
        self.previous = ""   # what a holder that is gone left in the file
        self._key: tuple[int, int] | None = None

    def acquire(self) -> "FolderLock":
        dir_fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self._lock_folder(dir_fd)
            fd = _open_lock_file(self.path)
            if not _flock(fd, fcntl.LOCK_EX):
                os.close(fd)
                raise self._busy(_read(self.path))
        except BaseException:
            os.close(dir_fd)
            raise
        self.previous = _read_fd(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder_record(os.getpid()).encode(), 0)
        st = os.fstat(dir_fd)
        self.fd, self.dir_fd, self._key = fd, dir_fd, (st.st_dev, st.st_ino)
        _HELD.add(self._key)
        return self

    def _lock_folder(self, dir_fd: int) -> None:
        deadline = None
        while not _flock(dir_fd, fcntl.LOCK_EX):
            holder = _read(self.path)
            if holder_alive(holder):
                raise self._busy(holder)
            # The named holder is gone; what still holds the folder is what it started (its ranks).
            deadline = deadline or time.monotonic() + DEAD_HOLDER_WAIT_S
            if time.monotonic() > deadline:
                raise RunFolderBusy(
                    f"{self.path.parent} is still held by processes a dead run left behind "
                    f"({holder or 'holder unknown'}; lock {self.path}): its ranks may still measure into it. "
                    f"Stop them (`fuser -v {self.path.parent}` lists them), then resume") from None
            time.sleep(0.2)

    def _busy(self, holder: str) -> RunFolderBusy:
        return RunFolderBusy(
            f"{self.path.parent} is being written by another commbench run ({holder or 'holder unknown'}; "
            f"lock {self.path}): wait for it to end or stop it; two runs in one folder would measure "
            f"Cases twice and interleave their samples")

    def fds(self) -> tuple[int, ...]:
        """Descriptors a launch keeps open so that the folder stays locked while its ranks run."""
        return tuple(fd for fd in (self.dir_fd, self.fd) if fd is not None)

    def release(self) -> None:
        if self._key is not None:
            _HELD.discard(self._key)
            self._key = None
        for fd in self.fds():
            os.close(fd)   # closing drops the flock; launches holding a copy keep it until they end
        self.fd = self.dir_fd = None


def writer_holding(folder: Path) -> str | None:
    """Who writes ``folder`` now (the lock file's words, or "holder unknown"), else None. The
    process holding the lock itself gets None: a run reads its own folder for its summary."""
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None   # not a folder: the reader says so
    try:
        st = os.fstat(dir_fd)
        if (st.st_dev, st.st_ino) in _HELD:
            return None
        if _flock(dir_fd, fcntl.LOCK_SH):
            fcntl.flock(dir_fd, fcntl.LOCK_UN)
            return None
        return _read(Path(folder) / LOCK_NAME) or "holder unknown"
    finally:
        os.close(dir_fd)


def holder_record(pid: int) -> str:
    """What the lock file says: ``pid N start T on host H since UTC`` (T: the pid's start time)."""
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    start = procs.start_ticks(pid)
    return f"pid {pid}{f' start {start}' if start is not None else ''} on host {socket.gethostname()} since {stamp}\n"


def holder_alive(record: str) -> bool:
    """False only when the record names a process of this host that is gone (its pid absent, or
    reused by a process that started at another time); unknown holders count as alive."""
    m = _HOLDER.search(record or "")
    if m is None or m.group(3) != socket.gethostname():
        return True
    return procs.runs(int(m.group(1)), None if m.group(2) is None else int(m.group(2)))


def _flock(fd: int, how: int) -> bool:
    """True when the lock was taken (or the filesystem has none), False when someone holds it."""
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in NO_LOCKS:
            return True
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _open_lock_file(path: Path) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RunFolderBusy(f"{path} is a symbolic link: commbench never follows links inside a run "
                                f"folder; remove it") from None
        if exc.errno == errno.EISDIR:
            raise RunFolderBusy(f"the lock file {path} is a folder, not the file commbench keeps there: "
                                f"remove it (rmdir) and run again") from None
        raise


def _read(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return _read_fd(fd)
    finally:
        os.close(fd)


def _read_fd(fd: int) -> str:
    try:
        return preview(os.pread(fd, 200, 0).decode("utf-8", "replace").strip(), 120, quote=False)
    except OSError:
        return ""
