"""The one way into a run folder's files, for reading and writing (docs/results.md).

A run folder may have been copied, edited or tampered with, so nothing inside it is trusted:
- no symbolic link is followed: every component below the folder is opened with O_NOFOLLOW,
  one directory at a time, so a link planted at ``results.jsonl`` or ``logs/`` is refused
  (RunFolderError naming it), never read from or written through;
- a name derived from the folder's contents is validated (``safe_name``, ``safe_relpath``)
  before it becomes a path: no ``..``, no separators, no control characters, bounded bytes;
- a whole file is written to a temporary twin and renamed over the target (``write_atomic``),
  so a crash or a full disk leaves the earlier file, never a cut one;
- a full disk or quota is StorageFull and a read-only or protected folder a RunFolderError,
  each naming the file.
Appends (results.jsonl, samples.csv) stay appends, through the same opener.
"""
from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path

from ..errors import RunFolderError, StorageFull, preview

# A full disk, a full quota, or a file-size limit: the run stops cleanly (exit 1), never a traceback.
STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)
NAME_MAX_BYTES = 255
MAX_DEPTH = 8   # how deep check_no_links looks (a run folder is two levels deep)
MAX_ENTRIES = 200_000


class LinkRefused(RunFolderError):
    """A symbolic link inside a run folder: commbench never follows one."""


def name_problem(name, max_bytes: int = NAME_MAX_BYTES, *, hidden: bool = True) -> str | None:
    """Why ``name`` cannot be one file name inside a run folder (None: it can). ``hidden``: a name
    may start with '.' (the folder's own temporary and lock files do; a case id may not)."""
    if not isinstance(name, str) or not name:
        return "it is empty or not text"
    if len(name.encode("utf-8", "surrogatepass")) > max_bytes:
        return f"it is longer than {max_bytes} bytes"
    if "/" in name or "\\" in name or name in (".", "..") or (not hidden and name.startswith(".")):
        return "it holds a path separator, is '.' or '..'" + ("" if hidden else ", or starts with '.'")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        return "it holds NUL or another control character"
    return None


def safe_name(name) -> str:
    """``name`` as one file name inside a run folder, or RunFolderError: a name read from the
    folder's own files (a case id, a launch id) must never leave it or hide a control character."""
    text = name if isinstance(name, str) else str(name)
    problem = name_problem(text)
    if problem:
        raise RunFolderError(f"{preview(text)} cannot be a file name inside a run folder ({problem}): the "
                             "folder's files are damaged or not commbench's")
    return text


def safe_relpath(rel) -> tuple[str, ...]:
    """A relative path inside a run folder (``logs/launch-0.log``) as its validated components."""
    text = str(rel)
    if text.startswith("/"):
        raise RunFolderError(f"{preview(text)} is not a path inside the run folder")
    return tuple(safe_name(p) for p in text.split("/") if p not in ("", "."))


def describe(path: Path, exc: OSError) -> str:
    return f"cannot use {path}: {exc.strerror or exc}"


def open_fd(folder, rel, flags: int, mode: int = 0o644) -> int:
    """A descriptor of FOLDER/REL opened with ``flags``, no link followed below ``folder``.
    FileNotFoundError when it (or a directory above it) does not exist; LinkRefused for a link."""
    parts = safe_relpath(rel)
    if not parts:
        raise RunFolderError(f"{preview(str(rel))} names no file inside {folder}")
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except OSError as exc:
                _refuse_link(dfd, part, Path(folder, *parts[:i + 1]), exc)
                raise
            os.close(dfd)
            dfd = nfd
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dfd)
        except OSError as exc:
            _refuse_link(dfd, parts[-1], Path(folder, *parts), exc)
            raise
    finally:
        os.close(dfd)


def _refuse_link(dfd: int, name: str, path: Path, exc: OSError) -> None:
    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return
    try:
        is_link = stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
    except OSError:
        return
    if is_link:
        raise LinkRefused(f"{path} is a symbolic link: commbench never follows links inside a run folder "
                          f"(it would read or write outside it); remove the link") from None


def lstat(folder, rel) -> os.stat_result | None:
    """FOLDER/REL's own status (None when absent); LinkRefused when it is a link."""
    try:
        fd = open_fd(folder, rel, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        return os.fstat(fd)
    finally:
        os.close(fd)


def read_bytes(folder, rel, cap: int | None = None) -> bytes:
    """The whole of FOLDER/REL (FileNotFoundError when absent); RunFolderError above ``cap`` bytes."""
    fd = open_fd(folder, rel, os.O_RDONLY | os.O_NONBLOCK)
    path = Path(folder, rel)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RunFolderError(f"{path} is not a regular file")
        if cap is not None and st.st_size > cap:
            raise RunFolderError(f"{path}: {st.st_size} bytes is above the limit of {cap} bytes for a "
                                 f"run-folder file")
        chunks, left = [], (cap + 1 if cap is not None else -1)
        while left:
            chunk = os.read(fd, 1 << 20 if left < 0 else min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left = left - len(chunk) if left > 0 else left
        data = b"".join(chunks)
        if cap is not None and len(data) > cap:   # it grew while read
            raise RunFolderError(f"{path}: above the limit of {cap} bytes for a run-folder file")
        return data
    finally:
        os.close(fd)


def append(folder, rel, data: bytes) -> None:
    """Append ``data`` to FOLDER/REL (created when absent), flushed to the disk."""
    with storage(Path(folder, rel)):
        fd = open_fd(folder, rel, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(folder, rel, data: bytes) -> None:
    """Replace FOLDER/REL as a whole (``replace_whole``); a full or read-only disk is named."""
    with storage(Path(folder, *safe_relpath(rel))):
        replace_whole(folder, rel, data)


def replace_whole(folder, rel, data: bytes) -> None:
    """Replace FOLDER/REL as a whole: a temporary twin beside it, fsynced, then renamed over it.
    The twin never outlives a failure; a link at the target is replaced, never followed. An OSError
    is left to the caller (``write_atomic`` names a full disk the way a run reports it)."""
    parts = safe_relpath(rel)
    tmp = f".{parts[-1]}.tmp"
    dfd = _open_dir(folder, parts[:-1])
    try:
        try:
            os.unlink(tmp, dir_fd=dfd)   # a twin left by a crash (or a link planted there)
        except FileNotFoundError:
            pass
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=dfd)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
            raise
    finally:
        os.close(dfd)


def make_dirs(folder, rel) -> None:
    """Create the directories FOLDER/REL (those missing), no link followed below ``folder``:
    LinkRefused for a link in the way, an OSError for a file there or a folder that cannot grow."""
    parts = safe_relpath(rel)
    for i, part in enumerate(parts):
        dfd = _open_dir(folder, parts[:i])   # refuses a link at any level above
        try:
            os.mkdir(part, 0o755, dir_fd=dfd)
        except FileExistsError:
            pass
        finally:
            os.close(dfd)
    os.close(_open_dir(folder, parts))   # and a link (or a file) where the last one should be


def list_files(folder, rel, suffix: str = "") -> list[str]:
    """Names of the regular files in the directory FOLDER/REL ending in ``suffix``, sorted (none when
    it is absent); links and anything else are left out, never followed."""
    try:
        dfd = open_fd(folder, rel, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return []
    try:
        return sorted(e.name for e in os.scandir(dfd)
                      if e.name.endswith(suffix) and e.is_file(follow_symlinks=False))
    finally:
        os.close(dfd)


def truncate(folder, rel, size: int) -> None:
    """Cut FOLDER/REL back to ``size`` bytes (frees space: works on a full disk)."""
    fd = open_fd(folder, rel, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def unlink(folder, rel) -> None:
    """Remove FOLDER/REL (a link is removed itself, never its target); absent is fine."""
    parts = safe_relpath(rel)
    dfd = _open_dir(folder, parts[:-1])
    try:
        os.unlink(parts[-1], dir_fd=dfd)
    except FileNotFoundError:
        pass
    finally:
        os.close(dfd)


def check_no_links(folder) -> None:
    """LinkRefused naming the first symbolic link anywhere inside ``folder`` (the folder itself may
    be reached through one: `--out` is the user's choice, what is inside it is not)."""
    seen = 0
    stack = [(Path(folder), 0)]
    while stack:
        here, depth = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError as exc:
            raise RunFolderError(describe(here, exc)) from None
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                raise RunFolderError(f"{folder} holds more than {MAX_ENTRIES} files: not a run folder")
            if entry.is_symlink():
                raise LinkRefused(f"{entry.path} is a symbolic link: commbench never follows links inside a "
                                  f"run folder (it would read or write outside it); remove the link")
            if entry.is_dir(follow_symlinks=False) and depth < MAX_DEPTH:
                stack.append((Path(entry.path), depth + 1))


@contextmanager
def storage(path: Path):
    """A full disk, quota or file-size limit while writing ``path`` becomes StorageFull; a read-only
    or protected folder a RunFolderError; both name the file."""
    try:
        yield
    except OSError as exc:
        raise_storage(path, exc)
        raise


def raise_storage(path: Path, exc: OSError) -> None:
    if exc.errno in STORAGE_ERRNOS:
        raise StorageFull(f"cannot write {path}: {exc.strerror}; the run stopped. Every Case stored "
                          f"before is kept and the folder is consistent: free space, then continue with "
                          f"`commbench run SUITE --resume --out {path.parent}`") from None
    if exc.errno in READ_ONLY_ERRNOS:
        raise RunFolderError(f"cannot write {path}: {exc.strerror} (a read-only or protected folder): "
                             f"choose another --out") from None


def _open_dir(folder, parts: tuple[str, ...]) -> int:
    """A descriptor of the directory FOLDER/PARTS (the folder itself when ``parts`` is empty)."""
    if parts:
        return open_fd(folder, "/".join(parts), os.O_RDONLY | os.O_DIRECTORY)
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
