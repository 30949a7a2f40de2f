"""The run folder writer (docs/results.md): rows, samples and run.json, flushed as each Case ends.

Rows are appended to ``results.jsonl`` (flushed and fsynced as each Case ends)
and mirrored into ``results.csv`` (one line appended, or the whole file
rewritten atomically when a column appears or a Case is rerun), so the CSV
always holds the latest row of every Case measured so far.

Every append is all or nothing: a write that fails (disk full, quota) is cut back to the
file's previous length and raises StorageFull, so no row is half written and no row claims
samples that are not there (a Case's samples are written before its row).
"""
from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from ..errors import RunFolderError
from . import files, repair
from .folder_io import FOLDER_FILES, atomic_write, storage_marks, truncate_to  # noqa: F401 (callers import them here)
from .folder_io import all_or_nothing as _all_or_nothing, append as _append, csv_header as _csv_header
from .folder_io import cut_back as _cut_back, ends_with_newline as _ends_with_newline
from .folder_io import open_rb as _open_rb, parse_line as _parse_line, size_of as _size
from .names import folder_name_part, new_run_dir, utc_stamp  # noqa: F401 (callers import them here)
from .check import read_meta_text
from .files import storage as _storage
from .lock import LOCK_NAME, FolderLock
from .writers_lock import attempt_from_env, one_writer as _writers, shared_from_env
from .recognise import recognise_for_resume, redact_meta
from .samples_kept import SampleKeeper, StampedCases
from .schema import ATTEMPT_COLUMN, COLUMNS, FINAL_STATUSES, PASS_COLUMN, SAMPLE_COLUMNS, SCHEMA_VERSION
# A rank that cannot store what it measured ends its launch with this status, and the parent stops
# the run (the next Cases could not be stored either).
STORAGE_FULL_EXIT = 75


class RunFolderExists(FileExistsError):
    pass


class RunFolder:
    """Writer for one run folder. Only rank 0 (or the parent process) writes, one at a time.

    Rows already read from ``results.jsonl`` are kept in memory and only the
    bytes added since are parsed (another process may have appended), so
    storing a row costs the same at row 10 000 as at row 10: one line to the
    JSONL and, unless a column appears or a Case is replaced, one line to the
    CSV (else the CSV is rewritten atomically).

    ``shared``: other processes append to the folder at the same time (the launches of a wave), so
    every append takes the writers' lock; a writer alone (a single launch, the parent between
    waves) appends without it. A rank's writer is shared when its launch set ``writers_lock.SHARED_VAR``.
    """

    def __init__(self, path: Path, shared: bool | None = None):
        self.path = Path(path)
        self.shared = shared_from_env() if shared is None else shared
        self._offset = 0                      # bytes of results.jsonl already parsed
        self._latest: dict[str, dict] = {}    # case_id -> last row, in run order
        self._extra: list[str] = []           # columns beyond COLUMNS, in order of appearance
        self._csv_columns: list[str] | None = None
        self._inode: int | None = None
        # Cases whose row was found at repair without samples: not done until a row appended after
        # byte _repair_mark of results.jsonl (a new measurement) replaces it
        self._unsampled: set[str] = set()
        self._repair_mark = 0

    # -- creation --
    def create(self, *, resume: bool) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise RunFolderExists(f"{self.path} exists and is not a folder: choose another --out")
        if (self.path.exists() and any(p.name != LOCK_NAME for p in self.path.iterdir())
                and not resume):
            raise RunFolderExists(
                f"{self.path} already exists and holds results: pass --resume to continue it, "
                f"or choose another --out")
        (self.path / "logs").mkdir(parents=True, exist_ok=True)

    def claim(self, *, resume: bool) -> None:
        """Create (or reopen, for --resume) the folder as its one writer: RunFolderError when the
        path cannot be a folder, RunFolderBusy (naming the holder) when another run writes it."""
        if self.path.is_symlink() and not self.path.exists():
            raise RunFolderError(f"{self.path} is a link to a folder that does not exist: choose another --out")
        if self.path.exists() and not self.path.is_dir():
            raise RunFolderError(f"{self.path} exists and is not a folder: choose another --out")
        if resume:
            recognise_for_resume(self.path)   # before anything is written into it, the lock included
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock = FolderLock(self.path).acquire()
        except OSError as exc:
            raise RunFolderError(f"cannot create the run folder {self.path}: {exc.strerror or exc} "
                                 f"(choose another --out)") from None
        try:
            self.create(resume=resume)
            files.check_no_links(self.path)   # a link planted inside would be written through
        except (OSError, RunFolderExists, RunFolderError) as exc:
            self.release()
            if isinstance(exc, (RunFolderExists, RunFolderError)):
                raise
            raise RunFolderError(f"cannot create the run folder {self.path}: {exc.strerror or exc}") from None

    def lock_fds(self) -> tuple[int, ...]:
        """Descriptors a launch keeps open so that the folder stays locked while its ranks run."""
        lock = getattr(self, "_lock", None)
        return lock.fds() if lock is not None else ()

    def release(self) -> None:
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()

    # -- rows --
    def append_row(self, row: dict) -> None:
        # Rows another writer added since our last look may be missing from the CSV (it can be
        # killed between its JSONL line and its CSV line): then the CSV is rewritten. Inside a launch
        # attempt the row carries it (`attempt`), and a superseded attempt is refused (writers_lock).
        fence = attempt_from_env()
        if fence is not None and row.get(ATTEMPT_COLUMN) is None:
            row = {**row, ATTEMPT_COLUMN: fence[1]}
        with _writers(self.path, self.shared):
            self._append_row(row)

    def _append_row(self, row: dict) -> None:
        others = self._sync()
        replaced = row.get("case_id") in self._latest
        p = self.path / "results.jsonl"
        line = (json.dumps(row, default=_jsonable) + "\n").encode()
        if _size(p) and not _ends_with_newline(p):
            line = b"\n" + line   # a line cut by a crash must not swallow this row
        csv_path = self.path / "results.csv"
        csv_size = _size(csv_path)
        with _all_or_nothing(p):
            _append(p, line)
            # Read our line back like any other: a cut line completed by the newline above
            # (a valid row that lacked only its newline) is picked up too.
            parsed = self._sync()
            try:
                self._store_csv(replaced or others > 0 or parsed != 1)
            except OSError:
                _cut_back(csv_path, csv_size)   # the CSV as it was: it must mirror the JSONL
                self._forget()
                raise

    def rows(self) -> list[dict]:
        """Every row ever written (a rerun Case appears more than once)."""
        try:
            data = files.read_bytes(self.path, "results.jsonl")
        except FileNotFoundError:
            return []
        return [r for r in map(_parse_line, data.splitlines()) if r is not None]

    def latest_rows(self) -> list[dict]:
        """One row per Case: the last one written (a --resume rerun supersedes a failed/timeout row)."""
        self._sync()
        return list(self._latest.values())

    def latest_row(self, case_id: str) -> dict | None:
        """The last row written for ``case_id`` (None when it has none): a look-up, not a scan."""
        self._sync()
        return self._latest.get(case_id)

    def rewrite_csv(self) -> None:
        self._sync()
        with _storage(self.path / "results.csv"):
            self._store_csv(replaced=True)

    def _forget(self) -> None:
        """Re-read results.jsonl from the start at the next look (it was cut back)."""
        self._offset, self._latest, self._extra, self._csv_columns, self._inode = 0, {}, [], None, None

    def _sync(self) -> int:
        """Parse what was appended to results.jsonl since the last look (by anyone); rows parsed."""
        try:
            fh = _open_rb(self.path / "results.jsonl")
        except FileNotFoundError:
            return 0
        with fh:
            st = os.fstat(fh.fileno())
            if st.st_size < self._offset or st.st_ino != self._inode:   # replaced under us: start over
                self._offset, self._latest, self._extra, self._csv_columns = 0, {}, [], None
                self._inode = st.st_ino
            fh.seek(self._offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1           # a last line without its newline is not complete yet
        parsed, pos = 0, self._offset
        for line in data[:end].splitlines(keepends=True):
            row = _parse_line(line)
            if row is not None:
                self._remember(row)
                if pos >= self._repair_mark:
                    self._unsampled.discard(row["case_id"])
                parsed += 1
            pos += len(line)
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
            buf = io.StringIO(newline="")
            csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore").writerow(_csv_cells(last, columns))
            _append(target, buf.getvalue().encode())
            return
        buf = io.StringIO(newline="")
        w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in self._latest.values():
            w.writerow(_csv_cells(r, columns))
        atomic_write(target, buf.getvalue().encode())
        self._csv_columns = columns

    def done_case_ids(self) -> set[str]:
        """Cases with a final row (any status but a timeout/failure of the whole launch are final),
        less measured Cases that repair found without samples and not yet measured again. A row
        stamped with a burn-in pass belongs to an ended pass: the pass running measures it again."""
        return {r["case_id"] for r in self.latest_rows()
                if r.get("status") in FINAL_STATUSES and r["case_id"] not in self._unsampled
                and PASS_COLUMN not in r}

    def earlier_pass_case_ids(self) -> set[str]:
        """Cases with a final row in an ended burn-in pass; results.jsonl read on from the last look."""
        return self.__dict__.setdefault("_stamped", StampedCases()).ids(self.path)

    # -- samples --
    def append_samples(self, samples: list[dict]) -> None:
        """Append a Case's samples (before its row: a row never claims samples not stored)."""
        with _writers(self.path, self.shared):
            self._append_samples(samples)

    def _append_samples(self, samples: list[dict]) -> None:
        p = self.path / "samples.csv"
        if _size(p) and not _ends_with_newline(p):
            self.keep_samples(None)   # a line cut by a crash: drop it, never glue onto it
        header = _csv_header(p)
        wanted = list(header or SAMPLE_COLUMNS)
        for row in samples:   # per-iteration extras (a training step's phases) become columns
            wanted += [k for k in row if k not in wanted]
        if header is not None and wanted != header:
            with _storage(p):
                _rewrite_with_columns(p, wanted)   # rare: the first Case that brings a new column
            header = wanted
        buf = io.StringIO(newline="")
        w = csv.DictWriter(buf, fieldnames=wanted, restval="")
        if header is None:
            w.writeheader()
        w.writerows(samples)
        with _all_or_nothing(p):
            _append(p, buf.getvalue().encode())

    def keep_samples(self, case_ids: set[str] | None) -> int:
        """Rewrite samples.csv with only complete UTF-8 lines (of ``case_ids`` when given, and of
        ended burn-in passes); lines dropped. A Case with a line that is not UTF-8 loses all its
        samples (it is measured again). Only what was appended since the last call is read, unless
        something has to be dropped (then the file is rewritten whole)."""
        keeper = self.__dict__.setdefault("_sample_keeper", SampleKeeper())
        return keeper.keep(self.path, case_ids, self.earlier_pass_case_ids)

    def repair(self) -> None:
        """Make the folder consistent before a --resume continues it, before anything is measured:
        lines of results.jsonl that are not UTF-8 dropped (their Cases run again), the CSV rewritten
        from it, samples only of Cases with a final row, no temporary files left, and measured Cases
        whose samples are gone (samples.csv deleted or cut) measured again."""
        for tmp in self.path.glob(".*.tmp"):
            files.unlink(self.path, tmp.name)
        if files.lstat(self.path, "results.jsonl") is not None:
            if repair.drop_undecodable_lines(self.path, "results.jsonl"):
                self._forget()
            self.rewrite_csv()
        self.keep_samples(self.done_case_ids())
        self._repair_mark = self._offset
        measured = {r["case_id"] for r in self.latest_rows() if r.get("status") in ("ok", "wrong")}
        self._unsampled = measured - repair.sampled_case_ids(self.path) if measured else set()

    # -- metadata --
    def write_meta(self, meta: dict) -> None:
        data = json.dumps(redact_meta({"schema_version": SCHEMA_VERSION, **meta}), indent=2, default=_jsonable)
        with _storage(self.path / "run.json"):
            atomic_write(self.path / "run.json", data.encode())

    def read_meta(self) -> dict:
        return read_meta(self.path)


def is_run_folder(path: Path) -> bool:
    """A folder holding results.csv (what `commbench run` writes; a link there is refused on reading)."""
    return Path(path).is_dir() and os.path.lexists(Path(path) / "results.csv")


def read_meta(path) -> dict:
    """run.json of a run folder ({} when it has none yet)."""
    meta_path = Path(path) / "run.json"
    if not os.path.lexists(meta_path):
        return {}
    return read_meta_text(meta_path)


def _rewrite_with_columns(path: Path, columns: list[str]) -> None:
    """Rewrite a CSV under a wider header (new cells empty), atomically."""
    text = files.read_bytes(path.parent, path.name).decode("utf-8", "replace")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=columns, restval="")
    w.writeheader()
    w.writerows(rows)
    atomic_write(path, buf.getvalue().encode())


def _csv_cells(row: dict, columns: list[str]) -> dict:
    return {k: ("" if row.get(k) is None else row.get(k)) for k in columns}


def _jsonable(obj):
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)
