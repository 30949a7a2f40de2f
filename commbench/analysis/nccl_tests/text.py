"""nccl-tests' printed tables (stdout) -> TestRun records; errors name the file and line."""
from __future__ import annotations

import math
import re
from pathlib import Path

from .records import (MAX_ITERS, MAX_LINE_CHARS, MAX_RANKS, MAX_SIZE_BYTES, MAX_THREADS_OR_GPUS, Device,
                      NcclTestsFormatError, ResultLine, Side, TestRun, half_unit, parse_int)

_VERSION = re.compile(r"^#\s*nccl-tests version (\S+)(?:\s+nccl-headers=(\d+))?(?:\s+nccl-library=(\d+))?")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded:\s*(\S+)")
_NTHREAD = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_SETTING = {   # "key: value" pairs of the nThread line and the attribute they fill
    "minBytes": ("min_bytes", r"minBytes\s+(\d+)"), "maxBytes": ("max_bytes", r"maxBytes\s+(\d+)"),
    "step": ("step", r"step:\s+(\S+)"), "warmup": ("warmup_iters", r"warmup iters:\s+(\d+)"),
    "iters": ("iters", r"(?<!warmup )(?<!agg )iters:\s+(\d+)"), "agg": ("agg_iters", r"agg iters:\s+(\d+)"),
    "validation": ("validation", r"validation:\s+(\d+)"), "graph": ("graph_launches", r"graph:\s+(\d+)"),
    "unalign": ("unalign", r"unalign:\s+(\d+)"),
}
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?(?:Pid\s+(\d+)\s+)?on\s+(\S+)\s+"
                   r"device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_BLOCKING = re.compile(r"^#\s*Blocking Enabled")
# NCCL's own log lines (NCCL_DEBUG=INFO/WARN) may interleave with the table: host:pid:tid [dev] NCCL ...
_NCCL_LOG = re.compile(r"^\S+:\d+:\d+\s+\[\d+\]\s+NCCL\s")
_INT = re.compile(r"^-?\d+$")
# nccl-tests' own failure report ("host: Test NCCL failure file.cu:54 '...'", " .. host pid N: Test failure").
_FAILURE = re.compile(r"Test (?:CUDA |NCCL )?failure")


class _TextSection:
    """State of one text section while its lines are read."""

    def __init__(self, path: Path, lineno: int):
        self.run = TestRun(path=path, where=f"{path}:{lineno}", fmt="text")
        self.have_settings = False
        self.table_at: int | None = None     # line of the column header
        self.timestamps = False
        self.done = False
        self.last_line = lineno


def parse_text(path: Path, text: str) -> list[TestRun]:
    sections: list[_TextSection] = []
    cur: _TextSection | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        where = f"{path}:{lineno}"
        if len(raw) > MAX_LINE_CHARS:
            raise NcclTestsFormatError(
                f"{where}: a line of {len(raw)} characters (the limit is {MAX_LINE_CHARS}; nccl-tests' lines "
                f"are ~150): not nccl-tests output (a binary file, or lines run together).")
        line = raw.rstrip("\r\n").rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        m = _VERSION.match(stripped)
        if m or (_NTHREAD.match(stripped) and (cur is None or cur.have_settings)):
            if cur is not None:
                _finish_text(cur)
            cur = _TextSection(path, lineno)
            sections.append(cur)
            if m:
                cur.run.version = m.group(1)
                headers, library = m.group(2), m.group(3)
                cur.run.nccl_headers = parse_int(headers, "nccl-headers", where, 0, MAX_ITERS) if headers else None
                cur.run.nccl_library = parse_int(library, "nccl-library", where, 0, MAX_ITERS) if library else None
                continue
        if cur is None:
            continue   # text before nccl-tests starts (a job script's echo, module loads ...)
        cur.last_line = lineno
        if stripped.startswith("#"):
            _text_comment(cur, stripped, where)
        elif _INT.match(stripped.split()[0]):
            if cur.table_at is None or cur.done:
                raise NcclTestsFormatError(
                    f"{where}: a result row outside the results table (no column header line "
                    f"'#  size  count  type ...' before it, or after the footer): {stripped[:80]!r}")
            cur.run.lines.append(_text_row(cur, stripped, where))
        elif _FAILURE.search(stripped) and not cur.done:
            raise NcclTestsFormatError(
                f"{where}: nccl-tests failed here ({stripped[:120]!r}) after {len(cur.run.lines)} "
                f"result row(s): the run did not finish, so there is nothing complete to import.")
        elif _NCCL_LOG.match(stripped) or cur.table_at is None or cur.done:
            continue   # NCCL log lines anywhere; other text outside the table is not ours to judge
        else:
            raise NcclTestsFormatError(
                f"{where}: inside the results table, neither a result row nor an NCCL log line: "
                f"{stripped[:80]!r}. Is the file corrupted, or did another program write into it?")
    if cur is not None:
        _finish_text(cur)
    if not sections:
        raise NcclTestsFormatError(
            f"{path}: no nccl-tests output found (no '# nccl-tests version' or '# nThread ... nGpus' "
            f"header line). Pass the stdout of an nccl-tests binary such as all_reduce_perf, or its -J JSON file.")
    return [s.run for s in sections]


def _text_comment(cur: _TextSection, line: str, where: str) -> None:
    run = cur.run
    if (m := _STARTING.match(line)) or (m := _CONCLUDED.match(line)):
        run.program = run.program or m.group(1)
    elif m := _NTHREAD.match(line):
        run.nthreads = parse_int(m.group(1), "nThread", where, 1, MAX_THREADS_OR_GPUS)
        run.ngpus = parse_int(m.group(2), "nGpus", where, 1, MAX_THREADS_OR_GPUS)
        for key, (attr, pattern) in _SETTING.items():
            if found := re.search(pattern, line):
                value = found.group(1)
                setattr(run, attr, value[:40] if attr == "step" else parse_int(value, key, where, 0, MAX_ITERS))
        missing = [k for k in ("warmup", "iters") if not re.search(_SETTING[k][1], line)]
        if missing:
            raise NcclTestsFormatError(f"{where}: the settings line lacks {', '.join(missing)}: {line[:100]!r}")
        cur.have_settings = True
    elif _BLOCKING.match(line):
        run.blocking = 1
    elif line.startswith("# Per-Iteration Report"):
        run.per_iter = True
    elif m := _RANK.match(line):
        run.devices.append(Device(rank=parse_int(m.group(1), "Rank", where, 0, MAX_RANKS - 1),
                                  group=parse_int(m.group(2) or 0, "Group", where, 0, MAX_RANKS),
                                  pid=parse_int(m.group(3), "Pid", where, 0, MAX_ITERS) if m.group(3) else None,
                                  host=m.group(4), device=parse_int(m.group(5), "device", where, 0, MAX_RANKS),
                                  pci=m.group(6), name=m.group(7)))
    elif _is_column_header(line):
        labels = line.lstrip("#").split()
        if "cputime" in labels:
            raise NcclTestsFormatError(
                f"{where}: this run used -C (report_cputime): its time column is the host's enqueue "
                f"time, not the operation's, and its bandwidths do not follow from it. Rerun without -C.")
        cur.table_at = int(where.rsplit(":", 1)[1])
        run.per_iter = run.per_iter or "i_min" in labels
        cur.timestamps = "timestamp" in labels
    elif m := _OOB.match(line):
        run.out_of_bounds = parse_int(m.group(1), "Out of bounds values", where, 0, MAX_ITERS)
    elif m := _AVG.match(line):
        try:
            run.avg_busbw_gbps = float(m.group(1))
        except ValueError:
            raise NcclTestsFormatError(f"{where}: 'Avg bus bandwidth' is not a number: {m.group(1)!r}") from None
        cur.done = True


def _is_column_header(line: str) -> bool:
    labels = line.lstrip("#").split()
    return labels[:3] == ["size", "count", "type"]


def _number(token: str, what: str, where: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise NcclTestsFormatError(f"{where}: {what} {token[:40]!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        # nccl-tests prints a time and a bandwidth >= 0 (its -1 "no result" is a JSON null)
        raise NcclTestsFormatError(f"{where}: {what} is {token[:40]}: a time or bandwidth is a finite number "
                                   f">= 0; the row is damaged or edited.")
    return value


def _text_row(cur: _TextSection, line: str, where: str) -> ResultLine:
    run = cur.run
    per_side = 8 if run.per_iter else 4
    want = 5 + 2 * per_side + (2 if cur.timestamps else 0)
    tok = line.split()
    if len(tok) != want:
        raise NcclTestsFormatError(
            f"{where}: a result row has {len(tok)} fields, expected {want} (size count type redop root, "
            f"then time algbw busbw #wrong{' and 4 per-iteration columns' if run.per_iter else ''} for "
            f"out-of-place and in-place). Is the line cut short? {line[:100]!r}")
    if not (_INT.match(tok[0]) and _INT.match(tok[1]) and _INT.match(tok[4])):
        raise NcclTestsFormatError(f"{where}: size, count and root must be integers: {line[:100]!r}")
    size_bytes = parse_int(tok[0], "size", where, 0, MAX_SIZE_BYTES)
    count = parse_int(tok[1], "count", where, 0, MAX_SIZE_BYTES)
    root = parse_int(tok[4], "root", where, -1, MAX_RANKS)
    sides = []
    for k, in_place in ((0, False), (1, True)):
        f = tok[5 + k * per_side: 5 + (k + 1) * per_side]
        label = "in-place" if in_place else "out-of-place"
        wrong = None
        if f[3] != "N/A":
            w = _number(f[3], f"{label} #wrong", where)
            if w != int(w):
                raise NcclTestsFormatError(f"{where}: {label} #wrong {f[3]!r} is not a count")
            wrong = int(w)
        side = Side(in_place=in_place, time_us=_number(f[0], f"{label} time", where),
                    algbw_gbps=_number(f[1], f"{label} algbw", where),
                    busbw_gbps=_number(f[2], f"{label} busbw", where), wrong=wrong,
                    time_half_unit=half_unit(f[0]), algbw_half_unit=half_unit(f[1]),
                    busbw_half_unit=half_unit(f[2]))
        if run.per_iter:
            side.iter_min_us = _number(f[4], f"{label} i_min", where)
            side.iter_max_us = _number(f[5], f"{label} i_max", where)
            side.iter_p99_us = _number(f[6], f"{label} i_p99", where)
        sides.append(side)
    return ResultLine(where=where, size_bytes=size_bytes, count=count, type_name=tok[2],
                      redop=tok[3], root=root, sides=sides)


def _finish_text(cur: _TextSection) -> None:
    run = cur.run
    if cur.done:
        _check_complete(run)
        return
    where = f"{run.path}:{cur.last_line}"
    if cur.table_at is None:
        raise NcclTestsFormatError(
            f"{where}: the nccl-tests output that starts at line {run.where.rsplit(':', 1)[1]} ends "
            f"before its results table (no '#  size  count  type ...' header): the run failed or was "
            f"cut short.")
    raise NcclTestsFormatError(
        f"{where}: the results table that starts at line {cur.table_at} ends without nccl-tests' "
        f"footer ('# Avg bus bandwidth'): the file is truncated or the run stopped early "
        f"(after {len(run.lines)} result row(s)).")


def _check_complete(run: TestRun) -> None:
    if run.nthreads is None or run.warmup_iters is None or run.iters is None:
        raise NcclTestsFormatError(f"{run.where}: no settings line ('# nThread N nGpus N ... warmup iters: "
                                   f"N iters: N ...') before the results.")
    if not run.devices:
        raise NcclTestsFormatError(f"{run.where}: no '#  Rank N ... device N [...]' lines: the world "
                                   f"size is unknown.")
    ranks = sorted(d.rank for d in run.devices)
    run.world_size = ranks[-1] + 1
    if ranks != list(range(len(ranks))):   # bounded by the lines read, not by a rank number
        have = set(ranks)
        missing = [r for r in range(min(run.world_size, len(ranks) + 8)) if r not in have]
        raise NcclTestsFormatError(f"{run.where}: rank lines are incomplete (missing rank(s) "
                                   f"{missing[:8]}) or repeated: the world size is unknown.")
    per_proc = (run.nthreads or 1) * (run.ngpus or 1)
    if run.world_size % per_proc:
        raise NcclTestsFormatError(f"{run.where}: {run.world_size} rank lines, but nThread x nGpus = "
                                   f"{per_proc} ranks per process does not divide it.")
    if run.program is None:
        raise NcclTestsFormatError(f"{run.where}: no '# Collective test starting: NAME' line: the "
                                   f"operation is unknown.")


