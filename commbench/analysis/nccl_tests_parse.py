"""Read nccl-tests output: the printed tables and the `-J` JSON file (docs/import.md).

The result is a neutral record per nccl-tests invocation (:class:`TestRun`) with
every number as the file states it; turning it into commbench rows is
``import_nccl_tests``' job. Errors name the file and line (or JSON field).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from commbench.errors import CommbenchError

# Half a unit of the last digit of a JSON number: nccl-tests writes doubles with "%lf".
JSON_HALF_UNIT = 5e-7


class NcclTestsFormatError(CommbenchError):
    """An nccl-tests output file is malformed, truncated or not nccl-tests output."""


@dataclass
class Device:
    rank: int
    host: str
    device: int
    pci: str
    name: str
    group: int = 0
    pid: int | None = None


@dataclass
class Side:
    """One half of a result line: out-of-place or in-place, as printed."""

    in_place: bool
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None                 # None: nccl-tests printed N/A (not checked)
    time_half_unit: float             # rounding of the printed numbers (checks allow this much)
    algbw_half_unit: float
    busbw_half_unit: float
    iter_min_us: float | None = None  # -I per-iteration columns
    iter_max_us: float | None = None
    iter_times_us: list[float] | None = None             # -I in JSON: slowest process per iteration
    per_process_times_us: list[list[float]] | None = None


@dataclass
class ResultLine:
    where: str                        # "file:line" or "file: results[i]"
    size_bytes: int
    count: int
    type_name: str
    redop: str
    root: int
    sides: list[Side]


@dataclass
class TestRun:
    """One nccl-tests invocation: a section of a text file, or one JSON file."""

    path: Path
    where: str
    fmt: str                           # "text" or "json"
    program: str | None = None         # e.g. all_reduce_perf
    version: str | None = None         # nccl-tests version (text only)
    nccl_headers: int | None = None
    nccl_library: int | None = None
    nthreads: int | None = None
    ngpus: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    step: str | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    agg_iters: int = 1
    validation: int = 1
    graph_launches: int = 0
    unalign: int = 0
    blocking: int = 0
    per_iter: bool = False
    cputime: bool = False
    devices: list[Device] = field(default_factory=list)
    world_size: int | None = None
    lines: list[ResultLine] = field(default_factory=list)
    out_of_bounds: int | None = None
    avg_busbw_gbps: float | None = None
    command: list[str] | None = None
    env: dict[str, str] | None = None
    start_time: str | None = None
    end_time: str | None = None
    errors: list[str] = field(default_factory=list)


def read(path: Path) -> list[TestRun]:
    """Every nccl-tests invocation in ``path`` (a text log may hold several, one after another)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise NcclTestsFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
    text = data.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        return [parse_json(path, text)]
    return parse_text(path, text)


def version_string(code: int | None) -> str | None:
    """NCCL_VERSION_CODE as 'major.minor.patch' (2.9+ codes are major*10000 + minor*100 + patch)."""
    if not code:
        return None
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def half_unit(printed: str) -> float:
    """Half a unit of the last printed digit of a "%f"/"%e"-style number: its rounding error."""
    t = printed.strip().lower()
    exp = 0
    if "e" in t:
        t, e = t.split("e", 1)
        exp = int(e)
    decimals = len(t.split(".", 1)[1]) if "." in t else 0
    return 0.5 * 10.0 ** (exp - decimals)


# ---- text tables -------------------------------------------------------------------------

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
        line = raw.rstrip("\r\n").rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        where = f"{path}:{lineno}"
        m = _VERSION.match(stripped)
        if m or (_NTHREAD.match(stripped) and (cur is None or cur.have_settings)):
            if cur is not None:
                _finish_text(cur)
            cur = _TextSection(path, lineno)
            sections.append(cur)
            if m:
                cur.run.version = m.group(1)
                cur.run.nccl_headers = int(m.group(2)) if m.group(2) else None
                cur.run.nccl_library = int(m.group(3)) if m.group(3) else None
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
        run.nthreads, run.ngpus = int(m.group(1)), int(m.group(2))
        for attr, pattern in _SETTING.values():
            if found := re.search(pattern, line):
                value = found.group(1)
                setattr(run, attr, value if attr == "step" else int(value))
        missing = [k for k in ("warmup", "iters") if not re.search(_SETTING[k][1], line)]
        if missing:
            raise NcclTestsFormatError(f"{where}: the settings line lacks {', '.join(missing)}: {line[:100]!r}")
        cur.have_settings = True
    elif _BLOCKING.match(line):
        run.blocking = 1
    elif line.startswith("# Per-Iteration Report"):
        run.per_iter = True
    elif m := _RANK.match(line):
        run.devices.append(Device(rank=int(m.group(1)), group=int(m.group(2) or 0),
                                  pid=int(m.group(3)) if m.group(3) else None, host=m.group(4),
                                  device=int(m.group(5)), pci=m.group(6), name=m.group(7)))
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
        run.out_of_bounds = int(m.group(1))
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
        raise NcclTestsFormatError(f"{where}: {what} {token!r} is not a number") from None
    if math.isnan(value):
        raise NcclTestsFormatError(f"{where}: {what} is nan")
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
    sides = []
    for k, in_place in ((0, False), (1, True)):
        f = tok[5 + k * per_side: 5 + (k + 1) * per_side]
        label = "in-place" if in_place else "out-of-place"
        wrong = None
        if f[3] != "N/A":
            w = _number(f[3], f"{label} #wrong", where)
            if w < 0 or w != int(w):
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
        sides.append(side)
    return ResultLine(where=where, size_bytes=int(tok[0]), count=int(tok[1]), type_name=tok[2],
                      redop=tok[3], root=int(tok[4]), sides=sides)


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
    if ranks != list(range(run.world_size)):
        missing = sorted(set(range(run.world_size)) - set(ranks))
        raise NcclTestsFormatError(f"{run.where}: rank lines are incomplete (missing rank(s) "
                                   f"{missing[:8]}) or repeated: the world size is unknown.")
    per_proc = (run.nthreads or 1) * (run.ngpus or 1)
    if run.world_size % per_proc:
        raise NcclTestsFormatError(f"{run.where}: {run.world_size} rank lines, but nThread x nGpus = "
                                   f"{per_proc} ranks per process does not divide it.")
    if run.program is None:
        raise NcclTestsFormatError(f"{run.where}: no '# Collective test starting: NAME' line: the "
                                   f"operation is unknown.")


# ---- -J JSON --------------------------------------------------------------------------------


def parse_json(path: Path, text: str) -> TestRun:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NcclTestsFormatError(
            f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}); an nccl-tests -J file "
            f"that ends early was cut short (the run was killed before it finished).") from None
    if not isinstance(doc, dict) or "results" not in doc or "config" not in doc:
        raise NcclTestsFormatError(f"{path}: JSON without 'config' and 'results': not an nccl-tests -J file.")
    j = _Json(path)
    run = TestRun(path=path, where=str(path), fmt="json")
    args = j.get(doc, "args", list, "")
    if not args:
        raise NcclTestsFormatError(f"{path}: 'args' is empty: the operation (argv[0]) is unknown.")
    run.command = [str(a) for a in args]
    run.program = Path(run.command[0]).name
    run.env = _env_dict(doc.get("env"))
    run.nccl_library = doc.get("nccl_version") if isinstance(doc.get("nccl_version"), int) else None
    run.start_time, run.end_time = doc.get("start_time"), doc.get("end_time")
    cfg = j.get(doc, "config", dict, "")
    run.nthreads = j.int(cfg, "nthreads", "config")
    run.ngpus = j.int(cfg, "ngpus", "config")
    run.min_bytes = cfg.get("minimum_bytes")
    run.max_bytes = cfg.get("maximum_bytes")
    run.step = str(cfg.get("step_factor", cfg.get("step_bytes", "")))
    run.warmup_iters = j.int(cfg, "warmup_iters", "config")
    run.iters = j.int(cfg, "iterations", "config")
    run.agg_iters = int(cfg.get("aggregated_iterations", 1))
    run.validation = int(cfg.get("validation", 1))
    run.graph_launches = int(cfg.get("graph", 0))
    run.blocking = 1 if cfg.get("blocking_collectives") in (True, "true", 1) else 0
    run.per_iter = cfg.get("per_iter_timing") in (True, "true", 1)
    devices = j.get(cfg, "devices", list, "config")
    if not devices:
        raise NcclTestsFormatError(f"{path}: config.devices is empty: the world size is unknown.")
    for i, d in enumerate(devices):
        at = f"config.devices[{i}]"
        run.devices.append(Device(rank=j.int(d, "rank", at), group=int(d.get("group", 0)), pid=d.get("pid"),
                                  host=str(j.get(d, "hostname", str, at)), device=j.int(d, "device", at),
                                  pci=str(d.get("device_hex", "")), name=str(d.get("device_info", ""))))
    # One entry per process (nccl-tests parses the first device line of each process).
    run.world_size = len(devices) * run.nthreads * run.ngpus
    for i, r in enumerate(j.get(doc, "results", list, "")):
        run.lines.append(_json_line(j, r, f"results[{i}]", run))
    errors = doc.get("errors")
    run.errors = [str(e) for e in errors] if isinstance(errors, list) else []
    avg = doc.get("average_bus_bandwidth")
    if not isinstance(avg, dict) or "bandwidth" not in avg:
        said = f" nccl-tests reported: {'; '.join(run.errors)}" if any(run.errors) else ""
        raise NcclTestsFormatError(
            f"{path}: no 'average_bus_bandwidth' after {len(run.lines)} result(s): the run did not "
            f"finish.{said}")
    run.avg_busbw_gbps = j.float(avg, "bandwidth", "average_bus_bandwidth")
    oob = doc.get("out_of_bounds")
    run.out_of_bounds = int(oob["count"]) if isinstance(oob, dict) and "count" in oob else None
    return run


class _Json:
    """Typed field access that names the JSON path of a missing or mistyped field."""

    def __init__(self, path: Path):
        self.path = path

    def _fail(self, at: str, key: str, what: str):
        name = f"{at}.{key}" if at else key
        raise NcclTestsFormatError(f"{self.path}: {name}: {what}")

    def get(self, obj, key: str, typ, at: str):
        if not isinstance(obj, dict):
            self._fail(at, key, "the enclosing value is not an object")
        if key not in obj:
            self._fail(at, key, "missing")
        if not isinstance(obj[key], typ) or isinstance(obj[key], bool):
            names = "/".join(t.__name__ for t in (typ if isinstance(typ, tuple) else (typ,)))
            self._fail(at, key, f"expected {names}, got {obj[key]!r:.60}")
        return obj[key]

    def int(self, obj, key: str, at: str) -> int:
        value = self.get(obj, key, (int, str), at)
        try:
            return int(value)
        except ValueError:
            self._fail(at, key, f"not an integer: {value!r:.60}")

    def float(self, obj, key: str, at: str) -> float:
        value = self.get(obj, key, (int, float, str), at)   # nccl-tests writes NaN as "nan"
        try:
            out = float(value)
        except ValueError:
            self._fail(at, key, f"not a number: {value!r:.60}")
        if math.isnan(out):
            self._fail(at, key, "nan")
        return out


def _json_line(j: _Json, r, at: str, run: TestRun) -> ResultLine:
    if not isinstance(r, dict):
        raise NcclTestsFormatError(f"{j.path}: {at}: not an object")
    if "cpu_time" in (r.get("out_of_place") or {}) or "cpu_time" in (r.get("in_place") or {}):
        raise NcclTestsFormatError(
            f"{j.path}: {at}: this run used -C (report_cputime): its time is the host's enqueue "
            f"time, not the operation's, and its bandwidths do not follow from it. Rerun without -C.")
    sides = []
    for key, in_place in (("out_of_place", False), ("in_place", True)):
        s = r.get(key)
        if s is None:
            continue   # nccl-tests writes null where it measured nothing
        sat = f"{at}.{key}"
        nwrong = s.get("nwrong") if isinstance(s, dict) else None
        side = Side(in_place=in_place, time_us=j.float(s, "time", sat), algbw_gbps=j.float(s, "alg_bw", sat),
                    busbw_gbps=j.float(s, "bus_bw", sat),
                    wrong=None if nwrong is None else int(j.float(s, "nwrong", sat)),
                    time_half_unit=JSON_HALF_UNIT, algbw_half_unit=JSON_HALF_UNIT,
                    busbw_half_unit=JSON_HALF_UNIT)
        per = r.get(f"{key}_per_iter")
        if isinstance(per, dict):
            side.iter_min_us = per.get("min_us")
            side.iter_max_us = per.get("max_us")
            times = per.get("times_us")
            if isinstance(times, list) and times:
                side.iter_times_us = [float(t) for t in times]
            procs = per.get("per_process_max_times_us")
            if isinstance(procs, list) and procs:
                side.per_process_times_us = [[float(t) for t in row] for row in procs]
        sides.append(side)
    if not sides:
        raise NcclTestsFormatError(f"{j.path}: {at}: neither out_of_place nor in_place results")
    return ResultLine(where=f"{j.path}: {at}", size_bytes=j.int(r, "size", at), count=j.int(r, "count", at),
                      type_name=str(j.get(r, "type", str, at)), redop=str(j.get(r, "redop", str, at)),
                      root=int(str(r.get("root", "-1")).strip() or -1), sides=sides)


def _env_dict(env) -> dict[str, str] | None:
    if not isinstance(env, list):
        return None
    out = {}
    for item in env:
        if isinstance(item, str) and "=" in item:
            k, v = item.split("=", 1)
            out[k] = v
    return out
