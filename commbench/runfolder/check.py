"""What the run-folder reader refuses, so a gate never passes on missing data (docs/results.md).

A results.csv or samples.csv is refused (RunFolderError: file:line: what, exit 2) when it is not
UTF-8, is larger than the limit, lacks its final line end or has a line with another number of
fields than its header (a cut or damaged file), lacks a required column, or holds a value that is
not what its column needs (`wrong=many`, an empty size_bytes, an unknown status, an `ok` row
without a time). A results.csv that lacks Cases its results.jsonl holds was cut or never
rewritten: refused too.
"""
from __future__ import annotations

import csv
import io
import json
import os
from array import array
from pathlib import Path

from ..errors import RunFolderError, preview
from . import files
from .schema import COLUMNS, PASS_COLUMN, SCHEMA_VERSION, STATUSES

MAX_FILE_BYTES = 256 * 1024 * 1024     # COMMBENCH_MAX_RUN_FILE_BYTES lifts it
SIZE_VAR = "COMMBENCH_MAX_RUN_FILE_BYTES"
# The contract's columns (DESIGN section 6): a results.csv without one of them is not a run's.
RESULT_REQUIRED = tuple(c for c in COLUMNS if c not in ("bench", "case_id", "in_place", "log"))
SAMPLE_INTEGER = ("rank", "iteration")
# Rows that claim a measurement must carry it.
MEASURED_STATUSES = ("ok", "wrong")


def read_text(path: Path, cap: int | None = None) -> str:
    """A run-folder file as text: bounded size, strict UTF-8 (the error names the line), never read
    through a link (files.LinkRefused)."""
    cap = cap or _limit()
    try:
        st = files.lstat(path.parent, path.name)
        if st is None:
            raise FileNotFoundError(2, "No such file or directory")
        if st.st_size > cap:
            raise RunFolderError(f"{path}: {st.st_size} bytes is above the limit of {cap} bytes for a run-folder "
                                 f"file (set {SIZE_VAR} to lift it)")
        data = files.read_bytes(path.parent, path.name, cap)
    except OSError as exc:
        raise RunFolderError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise RunFolderError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}): the file is "
                             "damaged or not commbench's") from None


def _limit() -> int:
    raw = os.environ.get(SIZE_VAR, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else MAX_FILE_BYTES


def scan_csv(path: Path, text: str, required: tuple[str, ...]) -> array:
    """Check a CSV's shape; return the line of each record (pandas row i is on line lines[i])."""
    if not text.strip():
        raise RunFolderError(f"{path}: empty: no header and no rows")
    if not text.endswith("\n"):
        last = text.count("\n") + 1
        raise RunFolderError(f"{path}:{last}: the last line has no line end: the file was cut while it was "
                             "written (a run still writing it, or a copy cut short)")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
        dups = sorted({c for c in header if header.count(c) > 1})
        if dups:
            raise RunFolderError(f"{path}:1: column {preview(dups[0])} appears twice in the header")
        missing = [c for c in required if c not in header]
        if missing:
            raise RunFolderError(f"{path}:1: lacks required column(s) {', '.join(missing[:8])}"
                                 f"{' ...' if len(missing) > 8 else ''} (docs/results.md)")
        fast = _record_lines_unquoted(path, text, len(header))
        if fast is not None:
            return fast
        lines = array("l")
        start = reader.line_num + 1
        for record in reader:
            if record:   # pandas skips blank lines too
                if len(record) != len(header):
                    raise RunFolderError(f"{path}:{start}: {len(record)} field(s) where the header has "
                                         f"{len(header)}: the file is cut or damaged")
                lines.append(start)
            start = reader.line_num + 1
    except csv.Error as exc:
        raise RunFolderError(f"{path}:{reader.line_num}: not a CSV line "
                             f"({preview(str(exc), 100, quote=False)})") from None
    return lines


def _record_lines_unquoted(path: Path, text: str, fields: int) -> array | None:
    """scan_csv's answer for a file with no quote and no carriage return (every line is one record:
    what commbench's writer produces), counted with numpy in one pass instead of a Python loop over
    millions of sample lines; None for any other file (the csv module reads it)."""
    if '"' in text or text.count("\r") != text.count("\r\n"):   # a lone \r ends a line for the csv module
        return None
    import numpy as np

    data = np.frombuffer(text.encode(), dtype=np.uint8)
    ends = np.flatnonzero(data == 10)   # the text ends with a line end (checked above)
    commas = np.searchsorted(np.flatnonzero(data == 44), ends)   # commas before each line end
    per_line = np.diff(commas, prepend=0)
    # the characters of each line without its end (\n or the csv module's \r\n): 0 is a blank line,
    # which pandas skips
    content = np.diff(ends, prepend=-1) - 1 - (data[np.maximum(ends - 1, 0)] == 13)
    records = content[1:] > 0
    bad = np.flatnonzero(records & (per_line[1:] != fields - 1))
    if bad.size:
        line = int(bad[0]) + 2
        raise RunFolderError(f"{path}:{line}: {int(per_line[line - 1]) + 1} field(s) where the header has "
                             f"{fields}: the file is cut or damaged")
    out = array("l")
    out.frombytes((np.flatnonzero(records) + 2).astype(np.int64).tobytes())
    return out


def check_results(path: Path, df, lines: array, numeric: tuple[str, ...]) -> None:
    """Values of a loaded results frame (raw strings still in ``df``) against their columns."""
    import pandas as pd

    for col in numeric:
        if col in df.columns:
            # every Case has a size: an empty size_bytes would reach compare, report and accept as NaN
            _numbers(path, df, col, lines, required=col == "size_bytes", integer=col == "size_bytes")
    bad = ~df["status"].isin(STATUSES)
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise RunFolderError(f"{path}:{lines[i]}: status {preview(df['status'].iloc[i])} is not one of "
                             f"{', '.join(STATUSES)}")
    measured = df["status"].isin(MEASURED_STATUSES)
    no_time = measured & pd.to_numeric(df["time_us"], errors="coerce").isna()
    if no_time.any():
        i = int(no_time.to_numpy().nonzero()[0][0])
        raise RunFolderError(f"{path}:{lines[i]}: a {df['status'].iloc[i]} row without time_us: the "
                             "measurement is missing")
    if "case_id" in df.columns:
        ids = df["case_id"].astype(str)
        dup = ids.duplicated() & (ids != "")
        if dup.any():
            i = int(dup.to_numpy().nonzero()[0][0])
            first = int((ids == ids.iloc[i]).to_numpy().nonzero()[0][0])
            raise RunFolderError(f"{path}:{lines[i]}: case {preview(ids.iloc[i])} appears twice (also on line "
                                 f"{lines[first]}): a Case has one row")


class DuplicateKeys(RunFolderError):
    """samples.csv holds one (case, rank, iteration) twice: two measurements were mixed."""

    def __init__(self, message: str, keys: list[tuple]):
        super().__init__(message)
        self.keys = keys   # (case_id, rank, iteration[, pass]) of each duplicated key


def check_samples(path: Path, df, lines: array) -> None:
    _numbers(path, df, "time_us", lines, required=True)
    for col in SAMPLE_INTEGER:
        _numbers(path, df, col, lines, required=True, integer=True)
    if PASS_COLUMN in df.columns:   # a burn-in's pass: empty until the pass ends
        _numbers(path, df, PASS_COLUMN, lines, integer=True)
    check_sample_keys(path, df, lines)


def check_sample_keys(path: Path, df, lines: array, shown: int = 5) -> None:
    """Each (case, rank, iteration) once (within a burn-in pass: the ``pass`` column is part of
    the key), else DuplicateKeys naming the first ``shown`` keys and their lines."""
    import pandas as pd

    if df.empty:
        return
    names = ["case_id", "rank", "iteration"] + ([PASS_COLUMN] if PASS_COLUMN in df.columns else [])
    keys = pd.DataFrame({"case_id": df["case_id"].astype(str),
                         **{c: pd.to_numeric(df[c], errors="coerce") for c in names[1:]}})
    dup = keys.duplicated(keep=False).to_numpy()
    if not dup.any():
        return
    found: dict[tuple, list[int]] = {}
    for i in dup.nonzero()[0]:
        key = tuple(_plain(v) for v in keys.iloc[int(i)])
        found.setdefault(key, []).append(int(lines[int(i)]))
    listed = "; ".join(_key_text(names, k) + f" on lines {', '.join(map(str, at[:4]))}"
                       for k, at in list(found.items())[:shown])
    more = f" (and {len(found) - shown} more)" if len(found) > shown else ""
    raise DuplicateKeys(
        f"{path}: {len(found)} sample key(s) (case, rank, iteration) appear more than once: {listed}{more}. "
        "Two launch attempts measured into this folder at once, or folders were merged: which "
        "measurement a time belongs to cannot be told. Measure these Cases again into a new folder "
        "(`commbench run SUITE --only ...`)", list(found))


def _plain(value):
    """A key cell as a plain value: integers without a decimal point, NaN as empty."""
    if isinstance(value, float):
        return "" if value != value else (int(value) if value.is_integer() else value)
    return value


def _key_text(names: list[str], key: tuple) -> str:
    case, rank, iteration = key[:3]
    text = f"case {preview(case)} rank {rank} iteration {iteration}"
    return text + (f" pass {key[3]}" if len(key) > 3 and key[3] != "" else "")


def _numbers(path: Path, df, col: str, lines: array, *, required: bool = False, integer: bool = False) -> None:
    """Every non-empty cell of ``col`` is a finite number (an integer when asked); empty cells only
    where not ``required``."""
    import numpy as np
    import pandas as pd

    raw = df[col]
    if pd.api.types.is_numeric_dtype(raw.dtype) and not pd.api.types.is_bool_dtype(raw.dtype):
        num = raw.to_numpy(dtype=float, na_value=np.nan)   # parsed as numbers already: NaN is an empty cell
        empty = np.isnan(num)
    else:
        empty = (raw.isna() | (raw.astype(str).str.strip() == "")).to_numpy()
        num = pd.to_numeric(raw.where(~empty), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    bad = ~empty & ~np.isfinite(num)
    if integer:
        bad |= ~empty & np.isfinite(num) & (num != np.round(num))
    if required:
        bad |= empty
    if bad.any():
        i = int(bad.nonzero()[0][0])
        what = "an integer" if integer else "a finite number"
        value = "" if empty[i] else raw.iloc[i]
        raise RunFolderError(f"{path}:{lines[i]}: column {col}: {preview(value)} is not {what}")


def check_against_jsonl(folder: Path, df) -> None:
    """The CSV mirrors results.jsonl; a Case the JSONL holds and the CSV lacks means a cut CSV."""
    jsonl = folder / "results.jsonl"
    if "case_id" not in df.columns or not os.path.lexists(jsonl):
        return
    text = read_text(jsonl)
    held = set()
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue   # a line cut by a crash: the writer repairs it on --resume
        if isinstance(row, dict) and isinstance(row.get("case_id"), str):
            held.add(row["case_id"])
    lacking = held - set(df["case_id"].astype(str))
    if lacking:
        raise RunFolderError(
            f"{folder / 'results.csv'}: lacks {len(lacking)} Case(s) that results.jsonl holds (e.g. "
            f"{sorted(lacking)[0]}): the CSV was cut or not rewritten after a crash; "
            f"`commbench run SUITE --resume --out {folder}` rewrites it")


def read_meta_text(path: Path) -> dict:
    """run.json: a JSON object (bounded size, UTF-8, any nesting refused cleanly)."""
    text = read_text(path, cap=64 * 1024 * 1024)
    try:
        meta = json.loads(text)
    except ValueError as exc:
        raise RunFolderError(f"cannot read {path}: {preview(str(exc), 120, quote=False)}") from None
    except RecursionError:
        raise RunFolderError(f"cannot read {path}: nested too deeply") from None
    if not isinstance(meta, dict):
        raise RunFolderError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    check_meta(path, meta)
    return meta


def check_meta(path: Path, meta: dict) -> None:
    """The run.json keys a reader relies on: ``schema_version`` not newer than this reader's (a newer
    writer may store what this one would misread), ``param_columns`` a map of family -> names."""
    version = meta.get("schema_version", SCHEMA_VERSION)   # run.json has always had it; absent = ours
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RunFolderError(f"{path}: schema_version {preview(version)} is not a positive integer")
    if version > SCHEMA_VERSION:
        raise RunFolderError(f"{path}: schema_version {version} is newer than this commbench reads "
                             f"(schema_version {SCHEMA_VERSION}): read the folder with the commbench that "
                             "wrote it, or upgrade commbench")
    params = meta.get("param_columns")
    if params is not None and not (isinstance(params, dict) and all(
            isinstance(v, list) and all(isinstance(n, str) for n in v) for v in params.values())):
        raise RunFolderError(f"{path}: param_columns {preview(params)} is not a map of family names to "
                             "lists of column names")
