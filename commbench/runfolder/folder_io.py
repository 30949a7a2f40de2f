"""Byte-level steps of the run folder writer: all-or-nothing appends, whole-file replacement,
cut-back marks, and the first line of a CSV or one JSON row read back (all through files.py)."""
from __future__ import annotations

import csv
import io
import json
import os
from contextlib import contextmanager
from pathlib import Path

from ..errors import RunFolderError, StorageFull
from . import files
from .files import storage

FOLDER_FILES = ("results.jsonl", "samples.csv")   # what rank 0 appends during a launch


def csv_header(path: Path) -> list[str] | None:
    """The header of a CSV file, or None when it does not exist or is empty."""
    try:
        fh = open_rb(path)
    except FileNotFoundError:
        return None
    with io.TextIOWrapper(fh, newline="") as text:
        return next(csv.reader(text), None)


def parse_line(line: bytes) -> dict | None:
    """A row, or None for a line that is not one: cut by a crash mid-write (the Case reruns on
    --resume), or valid JSON that is not an object with a case id."""
    line = line.strip()
    if not line:
        return None
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return row if isinstance(row, dict) and isinstance(row.get("case_id"), str) else None


def storage_marks(folder: Path) -> dict[str, int]:
    """Lengths of the files rank 0 appends to, to cut back to with ``truncate_to``."""
    return {name: size_of(Path(folder) / name) or 0 for name in FOLDER_FILES}


def truncate_to(folder: Path, marks: dict[str, int]) -> None:
    """Drop what was appended after ``marks`` (the launch that wrote it is dead)."""
    for name, size in marks.items():
        cut_back(Path(folder) / name, size)


def atomic_write(path: Path, data: bytes) -> None:
    """Write a whole file through a temporary twin and a rename; the twin never outlives a failure
    and a link at ``path`` is replaced, never written through."""
    files.write_atomic(Path(path).parent, Path(path).name, data)


def append(path: Path, data: bytes) -> None:
    files.append(path.parent, path.name, data)


def open_rb(path: Path):
    """``path`` open for binary reading, no link followed (FileNotFoundError when absent)."""
    return os.fdopen(files.open_fd(path.parent, path.name, os.O_RDONLY | os.O_NONBLOCK), "rb")


def size_of(path: Path) -> int | None:
    """The length of ``path`` (None when absent; a link is refused)."""
    st = files.lstat(path.parent, path.name)
    return None if st is None else st.st_size


@contextmanager
def all_or_nothing(path: Path):
    """Appends inside are undone (the file cut back to its length before) if any of them fails;
    a full disk becomes StorageFull."""
    size = size_of(path)
    try:
        with storage(path):
            yield
    except (OSError, StorageFull):
        cut_back(path, size)
        raise


def cut_back(path: Path, size: int | None) -> None:
    try:
        if size is None:
            files.unlink(path.parent, path.name)
        elif (size_of(path) or 0) > size:
            files.truncate(path.parent, path.name, size)   # frees space: works on a full disk
    except (OSError, RunFolderError):
        pass   # best effort; the reader refuses what is left cut


def ends_with_newline(path: Path) -> bool:
    try:
        with open_rb(path) as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) == b"\n"
    except OSError:   # missing or empty
        return False
