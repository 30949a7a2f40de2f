"""What samples.csv keeps, and the burn-in pass each sample belongs to (docs/results.md).

- ``stamp_samples``: when a burn-in pass ends its samples get the pass number in a ``pass``
  column, as its rows do, so the samples of one Case in several passes can be told apart.
- ``SampleKeeper``: samples.csv cut down to complete lines of Cases with a final row (and of
  ended passes) after a crash, a killed launch or a wave, reading only what was appended since its
  last look: a long run does not read every sample again at every wave.
- ``StampedCases``: the Cases with a final row in an ended pass (results.jsonl), read the same
  way; only a samples.csv without the ``pass`` column (an older burn-in) needs them.
"""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Callable

from . import files, repair
from .files import storage
from .folder_io import atomic_write, open_rb, parse_line
from .schema import FINAL_STATUSES, PASS_COLUMN, SAMPLE_COLUMNS

SAMPLES = "samples.csv"
# Bytes just before the verified end that must still be there: a file replaced by one that got
# the same inode number is read again from the start.
_SEAM_BYTES = 64


def _cells(line: str) -> list[str]:
    return next(csv.reader([line]), [])


def _line(cells: list[str]) -> bytes:
    buf = io.StringIO(newline="")
    csv.writer(buf).writerow(cells)   # the writer's dialect (lines end with \r\n)
    return buf.getvalue().encode()


def stamp_samples(folder: Path, pass_no: int) -> int:
    """Give every whole sample line without a pass the number ``pass_no`` (the ``pass`` column
    added when missing); the number of lines stamped. The first pass's end writes the column even
    into an absent samples.csv, so later passes append under it. A samples.csv that lacks the
    column after the first pass was written by a commbench that did not stamp samples: it is left
    as it is (which of its lines belong to which pass is not known)."""
    try:
        data = files.read_bytes(folder, SAMPLES)
    except FileNotFoundError:
        data = b""
    lines = data.splitlines(keepends=True)
    header = _cells(lines[0].decode("utf-8", "replace")) if lines else list(SAMPLE_COLUMNS)
    adding = PASS_COLUMN not in header
    if adding and pass_no > 1 and len(lines) > 1:
        return 0
    index = len(header) if adding else header.index(PASS_COLUMN)
    out = [_line([*header, PASS_COLUMN]) if adding else lines[0]]
    stamped = 0
    for raw in lines[1:]:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            out.append(raw)   # the next keep drops its Case's samples
            continue
        cells = _cells(text)
        if not text.endswith("\n") or len(cells) != len(header) or (not adding and cells[index]):
            out.append(raw)   # cut or damaged (dropped by the next keep), or of an ended pass
            continue
        if adding:
            cells.append(str(pass_no))
        else:
            cells[index] = str(pass_no)
        out.append(_line(cells))
        stamped += 1
    if stamped or adding:
        path = Path(folder) / SAMPLES
        with storage(path):
            atomic_write(path, b"".join(out))
    return stamped


class _Cursor:
    """How far a file that only grows by appends was read: its identity, the offset, and the bytes
    just before the offset (a file replaced by one that got the same inode number is read again)."""

    def __init__(self):
        self.key, self.offset, self.seam = None, 0, b""

    def appended(self, fh) -> bytes | None:
        """What was appended since (fh at its start), or None when the file must be read whole."""
        st = os.fstat(fh.fileno())
        if (st.st_dev, st.st_ino) != self.key or not self.offset or st.st_size < self.offset:
            return None
        fh.seek(self.offset - len(self.seam))
        if fh.read(len(self.seam)) != self.seam:
            return None
        return fh.read()

    def start(self, st: os.stat_result | None, data: bytes) -> None:
        """The file (``st``) was read from its start: ``data`` verified."""
        self.key = None if st is None or not data else (st.st_dev, st.st_ino)
        self.offset, self.seam = len(data), data[-_SEAM_BYTES:]

    def advance(self, data: bytes) -> None:
        """``data``, appended after the offset, verified too."""
        self.offset, self.seam = self.offset + len(data), (self.seam + data)[-_SEAM_BYTES:]


class SampleKeeper:
    """Keeps samples.csv to whole lines of the Cases asked for (and of ended passes), remembering
    how far the file is known to hold only such lines and which Cases' unstamped lines lie there."""

    def __init__(self):
        self._forget()

    def _forget(self) -> None:
        self._at, self._head = _Cursor(), b""   # the header line of the file read
        self._unstamped: set[str] = set()   # Cases with lines of the running pass before the cursor

    def keep(self, folder: Path, case_ids: set[str] | None, earlier: Callable[[], set[str]]) -> int:
        """Drop what ``RunFolder.keep_samples`` drops; the number of lines dropped. ``earlier()``:
        the Cases of ended passes, asked for only when samples.csv has no ``pass`` column."""
        path = Path(folder) / SAMPLES
        try:
            fh = open_rb(path)
        except FileNotFoundError:
            self._forget()
            return 0
        with fh:
            tail = self._at.appended(fh) if fh.read(len(self._head)) == self._head else None
        if tail is not None:
            header = _cells(self._head.decode("utf-8", "replace"))
            keep_ids = _keep_ids(case_ids, header, earlier)
            if (keep_ids is None or self._unstamped <= keep_ids) and (not tail or tail.endswith(b"\n")):
                _kept, dropped = repair.kept_samples(self._head + tail, keep_ids, _pass_index(header))
                if not dropped:
                    self._unstamped |= _unstamped_ids(tail, header)
                    self._at.advance(tail)
                    return 0
        return self._keep_whole(folder, case_ids, earlier)

    def _keep_whole(self, folder: Path, case_ids: set[str] | None, earlier) -> int:
        path = Path(folder) / SAMPLES
        data = files.read_bytes(folder, SAMPLES)
        header = _cells(data.split(b"\n", 1)[0].decode("utf-8", "replace")) if data else []
        kept, dropped = repair.kept_samples(data, _keep_ids(case_ids, header, earlier), _pass_index(header))
        if kept != data:
            with storage(path):
                atomic_write(path, kept)
        head_end = kept.find(b"\n") + 1
        self._head, self._unstamped = kept[:head_end], _unstamped_ids(kept[head_end:], header)
        self._at.start(files.lstat(folder, SAMPLES) if head_end else None, kept)
        return dropped


def _pass_index(header: list[str]) -> int | None:
    return header.index(PASS_COLUMN) if PASS_COLUMN in header else None


def _keep_ids(case_ids: set[str] | None, header: list[str], earlier) -> set[str] | None:
    """The Cases whose unstamped lines stay; with no ``pass`` column an ended pass's Cases too."""
    if case_ids is None:
        return None
    return set(case_ids) | (earlier() if _pass_index(header) is None else set())


def _unstamped_ids(body: bytes, header: list[str]) -> set[str]:
    index = _pass_index(header)
    out = set()
    for raw in body.splitlines():
        cells = _cells(raw.decode("utf-8", "replace"))
        if cells and (index is None or index >= len(cells) or not cells[index]):
            out.add(cells[0])
    return out


class StampedCases:
    """Cases with a final row stamped with a pass, from results.jsonl read where it was left off
    (a stamp rewrites the file: it is then read again from the start, once per pass)."""

    def __init__(self):
        self._at, self._ids = _Cursor(), set()

    def ids(self, folder: Path) -> set[str]:
        try:
            fh = open_rb(Path(folder) / "results.jsonl")
        except FileNotFoundError:
            self._at, self._ids = _Cursor(), set()
            return set()
        with fh:
            data, whole = self._at.appended(fh), None
            if data is None:   # first look, or the file was replaced (a stamp): from the start
                fh.seek(0)
                data, whole, self._ids = fh.read(), os.fstat(fh.fileno()), set()
        data = data[:data.rfind(b"\n") + 1]   # a last line without its newline is not complete yet
        for line in data.splitlines():
            row = parse_line(line)
            if row is not None and PASS_COLUMN in row and row.get("status") in FINAL_STATUSES:
                self._ids.add(row["case_id"])
        if whole is not None:
            self._at.start(whole, data)
        else:
            self._at.advance(data)
        return set(self._ids)
