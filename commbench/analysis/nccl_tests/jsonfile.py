"""nccl-tests' -J JSON file -> a TestRun record; errors name the file and the JSON field."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from commbench.errors import preview

from ..nccl_tests_options import OPTIONS, RANK_TIME, REGISTER, flag
from .records import (JSON_HALF_UNIT, MAX_ITERS, MAX_RANKS, MAX_SIZE_BYTES, MAX_THREADS_OR_GPUS, Device,
                      NcclTestsFormatError, ResultLine, Side, TestRun, bounded_int, option_value, parse_int)

# Options the JSON's config does not hold but its command line does: attribute and bounds
_OPTIONS = (("unalign", 0, MAX_SIZE_BYTES), ("register", 0, max(REGISTER)), ("average", 0, max(RANK_TIME)))


def parse_json(path: Path, text: str) -> TestRun:
    """An nccl-tests -J file as a TestRun; a field that is missing, mistyped or out of its bounds,
    or a key written twice in one object, is an NcclTestsFormatError naming the file and field."""
    doc = _load(path, text)
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
    _config(j, j.get(doc, "config", dict, ""), run)
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
    run.out_of_bounds = (j.int(oob, "count", "out_of_bounds", 0, MAX_ITERS)
                         if isinstance(oob, dict) and "count" in oob else None)
    return run


class _DuplicateKey(Exception):
    """A JSON object holds one key twice (json.loads would keep the last silently)."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _load(path: Path, text: str) -> dict:
    """The file's top-level object: valid JSON, every object's keys distinct, config and results."""
    try:
        doc = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise NcclTestsFormatError(
            f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}); an nccl-tests -J file "
            f"that ends early was cut short (the run was killed before it finished).") from None
    except _DuplicateKey as exc:
        key = str(exc.args[0])
        hits = [m.start() for m in re.finditer(re.escape(json.dumps(key)) + r"\s*:", text)]
        line = f":{text.count(chr(10), 0, hits[-1]) + 1}" if len(hits) == 2 else ""
        raise NcclTestsFormatError(
            f"{path}{line}: the key {preview(key, 40)} appears twice in one JSON object: nccl-tests writes each "
            f"key once (two files joined, or an edited file); one of them would be dropped silently.") from None
    except RecursionError:
        raise NcclTestsFormatError(f"{path}: JSON nested too deeply to be an nccl-tests -J file.") from None
    if not isinstance(doc, dict) or "results" not in doc or "config" not in doc:
        raise NcclTestsFormatError(f"{path}: JSON without 'config' and 'results': not an nccl-tests -J file.")
    return doc


def _config(j: "_Json", cfg: dict, run: TestRun) -> None:
    """The run's settings and devices from the file's ``config`` (and the options on its command line)."""
    path = j.path
    run.nthreads = j.int(cfg, "nthreads", "config", 1, MAX_THREADS_OR_GPUS)
    run.ngpus = j.int(cfg, "ngpus", "config", 1, MAX_THREADS_OR_GPUS)
    run.min_bytes = cfg.get("minimum_bytes")
    run.max_bytes = cfg.get("maximum_bytes")
    run.step = str(cfg.get("step_factor", cfg.get("step_bytes", "")))
    run.warmup_iters = j.int(cfg, "warmup_iters", "config", 0, MAX_ITERS)
    run.iters = j.int(cfg, "iterations", "config", 0, MAX_ITERS)
    run.agg_iters = j.int(cfg, "aggregated_iterations", "config", 0, MAX_ITERS, default=1)
    run.validation = j.int(cfg, "validation", "config", 0, MAX_ITERS, default=1)
    run.graph_launches = j.int(cfg, "graph", "config", 0, MAX_ITERS, default=0)
    run.blocking = 1 if cfg.get("blocking_collectives") in (True, "true", 1) else 0
    run.per_iter = cfg.get("per_iter_timing") in (True, "true", 1)
    for attr, lo, hi in _OPTIONS:
        given = option_value(run.command, OPTIONS[attr].short, OPTIONS[attr].long)
        if given is not None:
            setattr(run, attr, parse_int(given, flag(attr), f"{path}: args", lo, hi))
    run.average = 1 if run.average is None else run.average   # the command is known: absent = default
    run.register = 0 if run.register is None else run.register
    devices = j.get(cfg, "devices", list, "config")
    if not devices:
        raise NcclTestsFormatError(f"{path}: config.devices is empty: the world size is unknown.")
    for i, d in enumerate(devices):
        at = f"config.devices[{i}]"
        pid = j.int(d, "pid", at, 0, MAX_ITERS, default=None)
        run.devices.append(Device(rank=j.int(d, "rank", at, 0, MAX_RANKS - 1),
                                  group=j.int(d, "group", at, 0, MAX_RANKS, default=0), pid=pid,
                                  host=str(j.get(d, "hostname", str, at))[:256],
                                  device=j.int(d, "device", at, 0, MAX_RANKS),
                                  pci=str(d.get("device_hex", ""))[:64], name=str(d.get("device_info", ""))[:256]))
    # One entry per process (nccl-tests parses the first device line of each process).
    run.world_size = bounded_int(len(devices) * run.nthreads * run.ngpus, "world size (devices x nthreads x ngpus)",
                                 f"{path}: config", 1, MAX_RANKS)


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

    def int(self, obj, key: str, at: str, lo: int, hi: int, default=...) -> int:
        """An integer field within lo..hi; ``default`` when the field is absent (or null)."""
        if default is not ... and isinstance(obj, dict) and obj.get(key) is None:
            return default
        value = self.get(obj, key, (int, str), at)
        return parse_int(value, "value", f"{self.path}: {at + '.' if at else ''}{key}", lo, hi)

    def float(self, obj, key: str, at: str) -> float:
        value = self.get(obj, key, (int, float, str), at)   # nccl-tests writes NaN as "nan"
        return self.number(value, f"{at}.{key}" if at else key)

    def number(self, value, name: str) -> float:
        """A finite number >= 0 (a time, a bandwidth, a count of wrong elements)."""
        try:
            out = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else None
        except ValueError:
            out = None
        if out is None:
            raise NcclTestsFormatError(f"{self.path}: {name}: not a number: {value!r:.60}")
        if not math.isfinite(out) or out < 0:
            raise NcclTestsFormatError(f"{self.path}: {name}: {value!r:.40} is not a finite number >= 0; "
                                       f"the result is damaged or edited.")
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
            pat = f"{at}.{key}_per_iter"
            side.iter_min_us = j.float(per, "min_us", pat) if per.get("min_us") is not None else None
            side.iter_max_us = j.float(per, "max_us", pat) if per.get("max_us") is not None else None
            side.iter_p99_us = j.float(per, "p99_us", pat) if per.get("p99_us") is not None else None
            times = per.get("times_us")
            if isinstance(times, list) and times:
                side.iter_times_us = [j.number(t, f"{pat}.times_us[{i}]") for i, t in enumerate(times)]
            procs = per.get("per_process_max_times_us")
            if isinstance(procs, list) and procs:
                if len(procs) > run.world_size or not all(isinstance(row, list) for row in procs):
                    raise NcclTestsFormatError(f"{j.path}: {pat}.per_process_max_times_us: not one list of "
                                               f"times per process ({len(procs)} entries, {run.world_size} rank(s))")
                side.per_process_times_us = [[j.number(t, f"{pat}.per_process_max_times_us[{p}][{i}]")
                                              for i, t in enumerate(row)] for p, row in enumerate(procs)]
        sides.append(side)
    if not sides:
        raise NcclTestsFormatError(f"{j.path}: {at}: neither out_of_place nor in_place results")
    root = r.get("root", "-1")
    return ResultLine(where=f"{j.path}: {at}", size_bytes=j.int(r, "size", at, 0, MAX_SIZE_BYTES),
                      count=j.int(r, "count", at, 0, MAX_SIZE_BYTES),
                      type_name=str(j.get(r, "type", str, at))[:40], redop=str(j.get(r, "redop", str, at))[:40],
                      root=parse_int(str(root).strip() or -1, "root", f"{j.path}: {at}", -1, MAX_RANKS), sides=sides)


def _env_dict(env) -> dict[str, str] | None:
    if not isinstance(env, list):
        return None
    out = {}
    for item in env:
        if isinstance(item, str) and "=" in item:
            k, v = item.split("=", 1)
            out[k] = v
    return out
