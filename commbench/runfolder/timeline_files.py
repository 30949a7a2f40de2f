"""The writer and reader of what profiling stores beside the rows: timeline.csv and
traces/cases.jsonl (rank 0 appends through here; `trace` and the report read through here).

- ``timeline.csv``: case_id, rank, host, iteration, start_us, end_us, source, kernel_us: each
  rank's start and end of each timed iteration on rank 0's clock, relative to the Case's
  earliest start, and with ``--profile nccl`` the rank's kernel span of that iteration
  (docs/results.md).
- ``traces/cases.jsonl``: per Case, each rank's host, pid, clock offset and its error, and
  the Case's time origin ``t0_ns`` on rank 0's clock: what `commbench trace` needs to put
  every rank's records (NCCL plugin files are named by pid) on one timeline.

Readers trust neither file: sizes are bounded, text must be UTF-8, every line must hold what its
columns need (finite times, integer ranks) and a case id must be safe as a file name before
`trace` makes a path of it; anything else is a RunFolderError naming the file and line. A last
line without its line end (a rank killed while it wrote) is left out, the rest read, and ``warn``
is told which file and line.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from pathlib import Path
from typing import Callable

from ..errors import RunFolderError, preview
from . import check, files
from .writers_lock import one_writer

TIMELINE = "timeline.csv"
CASES = "traces/cases.jsonl"
TIMELINE_COLUMNS = ["case_id", "rank", "host", "iteration", "start_us", "end_us", "source", "kernel_us"]
# A case id becomes traces/chrome/<id>.json: within one file-name component (255 bytes).
CASE_ID_MAX_BYTES = 200
MAX_RANK = 1 << 20
MAX_INT = 1 << 63


def case_id_problem(case_id) -> str | None:
    """Why ``case_id`` cannot name a file inside the run folder (None: it can)."""
    return files.name_problem(case_id, CASE_ID_MAX_BYTES, hidden=False)


def _drop_cut_line(run_dir: Path, rel: str) -> None:
    """A write cut by a crash or a full disk leaves a last line without its newline: drop that
    part line, so the next append starts a line of its own (the Case it belonged to reruns)."""
    st = files.lstat(run_dir, rel)
    if st is None or st.st_size == 0:
        return
    fd = files.open_fd(run_dir, rel, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if os.pread(fd, 1, st.st_size - 1) == b"\n":
            return
    finally:
        os.close(fd)
    data = files.read_bytes(run_dir, rel)
    files.truncate(run_dir, rel, data.rfind(b"\n") + 1)


def append_timeline(run_dir: Path, rows: list[dict], shared: bool | None = None) -> None:
    """Append ``rows`` (the header first when the file is new). The launches of a wave append to
    one folder at once: the look at the file and the write are one step under the folder's
    writers lock (two first appenders would each write a header)."""
    if not rows:
        return
    with one_writer(run_dir, shared):
        _drop_cut_line(run_dir, TIMELINE)
        st = files.lstat(run_dir, TIMELINE)
        buf = io.StringIO(newline="")
        w = csv.DictWriter(buf, fieldnames=TIMELINE_COLUMNS, extrasaction="ignore")
        if st is None or st.st_size == 0:
            w.writeheader()
        w.writerows(rows)
        files.append(run_dir, TIMELINE, buf.getvalue().encode())


def append_case_line(run_dir: Path, line: dict, shared: bool | None = None) -> None:
    with files.storage(Path(run_dir) / CASES):
        files.make_dirs(run_dir, "traces")
    with one_writer(run_dir, shared):
        _drop_cut_line(run_dir, CASES)
        files.append(run_dir, CASES, (json.dumps(line) + "\n").encode())


Warn = Callable[[str], None]


def load_timeline(run_dir: Path, warn: Warn | None = None):
    """timeline.csv as a frame (empty when the run has none); a damaged file is refused, a cut last
    line and a span that ends before it starts left out (``warn`` is told)."""
    import numpy as np
    import pandas as pd

    path = Path(run_dir) / TIMELINE
    if files.lstat(run_dir, TIMELINE) is None:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    text = _repeated_headers_out(path, _whole_lines(path, _read(path), warn), warn)
    if not text.strip():   # only a cut header was written
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    lines = check.scan_csv(path, text, ("case_id", "rank", "iteration", "start_us", "end_us"))
    try:
        df = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=["", "nan", "NaN"],
                         dtype={"case_id": str, "host": str, "source": str})
    except (ValueError, pd.errors.ParserError) as exc:
        raise RunFolderError(f"cannot read {path}: {preview(str(exc), 200, quote=False)}") from None
    if len(df) != len(lines):
        raise RunFolderError(f"cannot read {path}: {len(df)} rows parsed where {len(lines)} lines hold data")
    for col, integer, required in (("rank", True, True), ("iteration", True, True), ("start_us", False, True),
                                   ("end_us", False, True), ("kernel_us", False, False)):
        if col not in df.columns:
            continue
        num = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        empty = df[col].isna().to_numpy()
        bad = (~np.isfinite(num) & (~empty | required)) | (np.isfinite(num) & (num < 0) & integer)
        if integer:
            bad |= np.isfinite(num) & ((num != np.round(num)) | (num > MAX_RANK if col == "rank" else False))
        if bad.any():
            i = int(bad.nonzero()[0][0])
            raise RunFolderError(f"{path}:{lines[i]}: column {col}: {preview(df[col].iloc[i])} is not "
                                 f"{'an integer' if integer else 'a finite number'}")
        df[col] = num.astype(int) if integer else num
    df = _spans_that_ran_forward(path, df, lines, warn)
    for col in ("case_id", "host", "source"):
        if col in df.columns:
            df[col] = df[col].fillna("").astype(str)
    return df


def _spans_that_ran_forward(path: Path, df, lines: list[int], warn: Warn | None):
    """``df`` without the iterations that end before they start, and with no negative kernel time:
    such a span is left out of every drawing (never drawn as 0 us as if it had been measured) and
    ``warn`` hears its file and line. The rows' times do not come from this file: nothing measured
    is lost, and the folder still reads (a run's own report must not fail over one span)."""
    import numpy as np

    backwards = (df["end_us"] < df["start_us"]).to_numpy()
    if backwards.any():
        where = [lines[i] for i in backwards.nonzero()[0]]
        i = int(backwards.nonzero()[0][0])
        if warn is not None:
            warn(f"{path}:{where[0]}: end_us {df['end_us'].iloc[i]:g} is before start_us "
                 f"{df['start_us'].iloc[i]:g}; {len(where)} such span(s) left out of the timelines"
                 + (f" (lines {', '.join(map(str, where[:5]))}{' ...' if len(where) > 5 else ''})"
                    if len(where) > 1 else ""))
        df = df[~backwards].reset_index(drop=True)
    if "kernel_us" in df.columns:
        negative = np.nan_to_num(df["kernel_us"].to_numpy(dtype=float), nan=0.0) < 0
        if negative.any():
            if warn is not None:
                i = int(negative.nonzero()[0][0])
                warn(f"{path}: kernel_us {df['kernel_us'].iloc[i]:g} is negative in {int(negative.sum())} "
                     "line(s): those kernel times are left out")
            df.loc[negative, "kernel_us"] = np.nan
    return df


def load_case_lines(run_dir: Path, warn: Warn | None = None) -> dict[str, dict]:
    """case_id -> its last line (a rerun replaces an earlier one); every whole line checked, a cut
    last line left out (``warn`` is told)."""
    path = Path(run_dir) / CASES
    out: dict[str, dict] = {}
    if files.lstat(run_dir, CASES) is None:
        return out
    text = _whole_lines(path, _read(path), warn)
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            d = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            raise RunFolderError(f"{where}: not a JSON line: the file is damaged or not commbench's") from None
        _check_case_line(d, where)
        out[d["case_id"]] = d
    return out


def _whole_lines(path: Path, text: str, warn: Warn | None) -> str:
    """``text`` without a last line that lacks its line end: a rank killed while it appended (its
    Case's data are incomplete, the other lines are whole; `run --resume` drops the part line)."""
    if not text or text.endswith("\n"):
        return text
    if warn is not None:
        warn(f"{path}:{text.count(chr(10)) + 1}: the last line has no line end (the file was cut while it was "
             "written, a rank killed mid-write, say): that line is left out, the rest is used")
    return text[:text.rfind("\n") + 1]


def _repeated_headers_out(path: Path, text: str, warn: Warn | None) -> str:
    """``text`` without copies of its header line further down. Launches of a wave that appended
    at once, before their appends were serialised, could each write the header to a new file:
    the rows around such a copy are whole, so the copy is left out (``warn`` is told) rather than
    the file refused. Blank lines keep their place, so line numbers stay the file's."""
    first_end = text.find("\n")
    if first_end < 0:
        return text
    header, rest = text[:first_end + 1], text[first_end + 1:]
    names = header.rstrip("\r\n")
    if names not in rest:
        return text
    kept, dropped = [header], []
    for lineno, line in enumerate(rest.splitlines(keepends=True), start=2):
        if line.rstrip("\r\n") == names:
            dropped.append(lineno)
            kept.append("\n")
        else:
            kept.append(line)
    if not dropped:
        return text
    if warn is not None:
        warn(f"{path}: the header line is repeated at line(s) {', '.join(map(str, dropped[:5]))}"
             f"{' ...' if len(dropped) > 5 else ''} (appenders that ran at once): left out, the rows are used")
    return "".join(kept)


def _read(path: Path) -> str:
    """A run-folder file of this module's, bounded and strict, read through files.py (no link followed)."""
    try:
        return check.read_text(path)
    except files.LinkRefused as exc:
        raise RunFolderError(f"{path}: not a regular file (a link was put there): refused ({exc})") from None


def _int_field(d: dict, key: str, where: str, lo: int, hi: int, *, optional: bool = False):
    value = d.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise RunFolderError(f"{where}: {key} {preview(value)} is not an integer in {lo}..{hi}")
    return value


def _check_case_line(d, where: str) -> None:
    """One line of cases.jsonl: a safe case id, and per rank what `trace` reads."""
    if not isinstance(d, dict):
        raise RunFolderError(f"{where}: not a JSON object")
    problem = case_id_problem(d.get("case_id"))
    if problem:
        raise RunFolderError(f"{where}: case_id {preview(d.get('case_id'))} is refused: {problem}")
    _int_field(d, "t0_ns", where, -MAX_INT, MAX_INT, optional=True)
    ranks = d.get("ranks")
    if not isinstance(ranks, list) or not ranks or len(ranks) > MAX_RANK:
        raise RunFolderError(f"{where}: ranks is not a list of the Case's ranks")
    seen = set()
    for i, r in enumerate(ranks):
        at = f"{where}: ranks[{i}]"
        if not isinstance(r, dict):
            raise RunFolderError(f"{at}: not a JSON object")
        rank = _int_field(r, "rank", at, 0, MAX_RANK)
        if rank in seen:
            raise RunFolderError(f"{at}: rank {rank} appears twice")
        seen.add(rank)
        if not isinstance(r.get("host"), str):
            raise RunFolderError(f"{at}: host {preview(r.get('host'))} is not text")
        _int_field(r, "pid", at, 0, MAX_INT, optional=True)
        _int_field(r, "offset_ns", at, -MAX_INT, MAX_INT, optional=True)
        err = r.get("clock_error_ns")
        if err is not None and (isinstance(err, bool) or not isinstance(err, (int, float)) or not math.isfinite(err)):
            raise RunFolderError(f"{at}: clock_error_ns {preview(err)} is not a finite number")
