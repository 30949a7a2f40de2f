"""The run folder writer (docs/results.md): rows, samples and run.json, flushed as each Case ends.

Rows are appended to ``results.jsonl`` (flushed and fsynced as each Case ends)
and mirrored into ``results.csv`` (one line appended, or the whole file
rewritten atomically when a column appears or a Case is rerun), so the CSV
always holds the latest row of every Case measured so far.
"""
from __future__ import annotations

import csv
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from ..errors import CommbenchError
from .schema import COLUMNS, SAMPLE_COLUMNS, SCHEMA_VERSION

class RunFolderExists(FileExistsError):
    pass


class RunFolderError(CommbenchError):
    """A path is not a readable run folder (no results.csv, unreadable CSV or JSON)."""


def utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def new_run_dir(base: Path, suite_name: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in suite_name)
    Path(base).mkdir(parents=True, exist_ok=True)
    stamp, n = utc_stamp(), 1
    while True:
        path = Path(base) / (f"{stamp}-{safe}" if n == 1 else f"{stamp}-{safe}-{n}")
        try:
            path.mkdir()  # atomic claim: two runs started in the same second get different folders
            return path
        except FileExistsError:
            n += 1


class RunFolder:
    """Writer for one run folder. Only rank 0 (or the parent process) writes, one at a time.

    Rows already read from ``results.jsonl`` are kept in memory and only the
    bytes added since are parsed (another process may have appended), so
    storing a row costs the same at row 10 000 as at row 10: one line to the
    JSONL and, unless a column appears or a Case is replaced, one line to the
    CSV (else the CSV is rewritten atomically).
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._offset = 0                      # bytes of results.jsonl already parsed
        self._latest: dict[str, dict] = {}    # case_id -> last row, in run order
        self._extra: list[str] = []           # columns beyond COLUMNS, in order of appearance
        self._csv_columns: list[str] | None = None
        self._inode: int | None = None

    # -- creation --
    def create(self, *, resume: bool) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise RunFolderExists(f"{self.path} exists and is not a folder: choose another --out")
        if self.path.exists() and any(self.path.iterdir()) and not resume:
            raise RunFolderExists(
                f"{self.path} already exists and holds results: pass --resume to continue it, "
                f"or choose another --out")
        (self.path / "logs").mkdir(parents=True, exist_ok=True)

    # -- rows --
    def append_row(self, row: dict) -> None:
        # Rows another writer added since our last look may be missing from the CSV (it can be
        # killed between its JSONL line and its CSV line): then the CSV is rewritten.
        others = self._sync()
        replaced = row.get("case_id") in self._latest
        p = self.path / "results.jsonl"
        with open(p, "ab") as fh:
            if fh.tell() and not _ends_with_newline(p):
                fh.write(b"\n")   # a line cut by a crash must not swallow this row
            fh.write((json.dumps(row, default=_jsonable) + "\n").encode())
            fh.flush()
            os.fsync(fh.fileno())
        # Read our line back like any other: a cut line completed by the newline above
        # (a valid row that lacked only its newline) is picked up too.
        parsed = self._sync()
        self._store_csv(replaced or others > 0 or parsed != 1)

    def rows(self) -> list[dict]:
        """Every row ever written (a rerun Case appears more than once)."""
        p = self.path / "results.jsonl"
        if not p.exists():
            return []
        return [r for r in map(_parse_line, p.read_bytes().splitlines()) if r is not None]

    def latest_rows(self) -> list[dict]:
        """One row per Case: the last one written (a --resume rerun supersedes a failed/timeout row)."""
        self._sync()
        return list(self._latest.values())

    def rewrite_csv(self) -> None:
        self._sync()
        self._store_csv(replaced=True)

    def _sync(self) -> int:
        """Parse what was appended to results.jsonl since the last look (by anyone); rows parsed."""
        p = self.path / "results.jsonl"
        if not p.exists():
            return 0
        st = p.stat()
        if st.st_size < self._offset or st.st_ino != self._inode:   # replaced under us: start over
            self._offset, self._latest, self._extra, self._csv_columns = 0, {}, [], None
            self._inode = st.st_ino
        with open(p, "rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1           # a last line without its newline is not complete yet
        parsed = 0
        for line in data[:end].splitlines():
            row = _parse_line(line)
            if row is not None:
                self._remember(row)
                parsed += 1
        self._offset += end
        return parsed

    def _remember(self, row: dict) -> bool:
        """Record a row as its Case's latest; True when it replaces an earlier row."""
        cid = row.get("case_id")
        replaced = self._latest.pop(cid, None) is not None   # the rerun takes the run-order position
        self._latest[cid] = row
        for k in row:
            if k not in COLUMNS and k not in self._extra:
                self._extra.append(k)
        return replaced

    def _store_csv(self, replaced: bool) -> None:
        columns = COLUMNS + self._extra
        target = self.path / "results.csv"
        # Another writer's rows or a rerun force `replaced`; a missing or cut file fails the newline test.
        if not replaced and columns == self._csv_columns and _ends_with_newline(target):
            last = next(reversed(self._latest.values()))
            with open(target, "a", newline="") as fh:
                csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore").writerow(_csv_cells(last, columns))
            return
        tmp = self.path / ".results.csv.tmp"
        with open(tmp, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
            w.writeheader()
            for r in self._latest.values():
                w.writerow(_csv_cells(r, columns))
        os.replace(tmp, target)
        self._csv_columns = columns

    def done_case_ids(self) -> set[str]:
        """Cases with a final row (any status but a timeout/failure of the whole launch are final)."""
        return {r["case_id"] for r in self.latest_rows() if r.get("status") in ("ok", "wrong", "skipped")}

    # -- samples --
    def append_samples(self, samples: list[dict]) -> None:
        p = self.path / "samples.csv"
        new = not p.exists()
        with open(p, "a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=SAMPLE_COLUMNS)
            if new:
                w.writeheader()
            w.writerows(samples)
            fh.flush()
            os.fsync(fh.fileno())

    # -- metadata --
    def write_meta(self, meta: dict) -> None:
        tmp = self.path / ".run.json.tmp"
        tmp.write_text(json.dumps({"schema_version": SCHEMA_VERSION, **meta}, indent=2, default=_jsonable))
        os.replace(tmp, self.path / "run.json")

    def read_meta(self) -> dict:
        return read_meta(self.path)


def read_meta(path) -> dict:
    """run.json of a run folder ({} when it has none yet)."""
    meta_path = Path(path) / "run.json"
    if not meta_path.is_file():
        return {}
    from .check import read_meta_text   # check imports this module

    return read_meta_text(meta_path)


def _parse_line(line: bytes) -> dict | None:
    line = line.strip()
    if not line:
        return None
    try:
        return json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None   # a line cut by a crash mid-write; the Case reruns on --resume


def _ends_with_newline(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) == b"\n"
    except OSError:   # missing or empty
        return False


def _csv_cells(row: dict, columns: list[str]) -> dict:
    return {k: ("" if row.get(k) is None else row.get(k)) for k in columns}


def _jsonable(obj):
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)
