"""Reading nccl-tests output: the printed tables and the `-J` JSON file (docs/import.md)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from .jsonfile import parse_json
from .records import (MAX_FILE_BYTES, SIZE_VAR, Device, NcclTestsFormatError, ResultLine, Side, TestRun,
                      half_unit, version_string)
from .text import parse_text

__all__ = ["Device", "NcclTestsFormatError", "ResultLine", "Side", "TestRun", "file_identity", "half_unit",
           "parse_json", "parse_text", "read", "version_string"]


def size_limit() -> int:
    raw = os.environ.get(SIZE_VAR, "")
    try:
        return int(raw) if raw else MAX_FILE_BYTES
    except ValueError:
        raise NcclTestsFormatError(f"{SIZE_VAR}={raw[:40]!r} is not a number of bytes") from None


def file_identity(path: Path) -> tuple[int, int]:
    """(device, inode) of a file: the same file under two names is one file."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise NcclTestsFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return st.st_dev, st.st_ino


def _read_bounded(path: Path) -> bytes:
    """The bytes of a regular file no larger than the limit; a device, FIFO or folder is refused
    before a byte is read (reading /dev/zero or a pipe would never end)."""
    cap = size_limit()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise NcclTestsFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a device, pipe or socket"
            raise NcclTestsFormatError(f"{path}: is {kind}, not a regular file: pass an nccl-tests output file.")
        if st.st_size > cap:
            raise NcclTestsFormatError(f"{path}: {st.st_size} bytes is above the limit of {cap} bytes for an "
                                       f"nccl-tests output (set {SIZE_VAR} to lift it).")
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:   # the file grew while read
                raise NcclTestsFormatError(f"{path}: more than {cap} bytes (the file grows while read; set "
                                           f"{SIZE_VAR} to lift the limit).")
        return b"".join(chunks)
    except OSError as exc:
        raise NcclTestsFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read(path: Path) -> list[TestRun]:
    """Every nccl-tests invocation in ``path`` (a text log may hold several, one after another)."""
    path = Path(path)
    text = _read_bounded(path).decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        return [parse_json(path, text)]
    return parse_text(path, text)
