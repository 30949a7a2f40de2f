"""`commbench import nccl-tests`: nccl-tests outputs -> one run folder with commbench's columns.

Each result line becomes two rows (out-of-place, in-place) keyed exactly as a
`commbench run` of the collectives family (nccl backend) keys the same point,
so `report`, `compare` and `accept` work on them unchanged (docs/import.md).
Bandwidths are recomputed with commbench.metrics and must agree with the
file's to its printed precision. Everything is parsed and checked before
anything is written; the folder appears whole or not at all.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from commbench import __version__, dtypes, metrics
from commbench.errors import CommbenchError, StorageFull
from commbench.comm.ops import OPS as COLLECTIVE_OPS
from commbench.comm.ops import ROOT, no_in_place_reason

from .nccl_tests import NcclTestsFormatError, ResultLine, Side, TestRun, file_identity, read, version_string
from .nccl_tests.settings import reduced_times, settings_of

SOURCE = "nccl-tests"
# nccl-tests binary (without _perf and a build suffix such as _mpi) -> commbench op: the same names.
OPS = {op: op for op in COLLECTIVE_OPS}
# nccl-tests type name -> commbench dtype (bytes from commbench.dtypes); char/int are pre-2.x names.
DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64",
          "int8": "int8", "char": "int8", "uint8": "uint8", "int32": "int32", "int": "int32",
          "uint32": "uint32", "int64": "int64", "uint64": "uint64", "f8e4m3": "float8_e4m3",
          "f8e5m2": "float8_e5m2"}
# Slack on top of the printed rounding when comparing bandwidths (float arithmetic only).
BW_SLACK = 1.01
# Ops whose nccl-tests table prints redop "none" (no reduction); sendrecv prints "sum" regardless.
NO_REDOP = ("all_gather", "alltoall", "broadcast", "alltoallv")


class ImportError_(CommbenchError):
    """The import cannot proceed (output folder taken, repeated points)."""


class ImportWriteError(CommbenchError):
    """The run folder could not be written (full disk, read-only folder): nothing was left."""

    exit_code = 1   # not bad input: the import failed


def op_of(run: TestRun) -> str:
    """The commbench op measured by a run, from its program name (all_reduce_perf, ..._mpi)."""
    name = re.sub(r"_perf(_\w+)?$", "", run.program or "")
    if name not in OPS:
        raise NcclTestsFormatError(
            f"{run.where}: {run.program} has no commbench counterpart; commbench imports "
            f"{', '.join(k + '_perf' for k in OPS)}.")
    return OPS[name]


def variant_of(run: TestRun, op: str, line: ResultLine) -> str:
    """`default`, or the nccl-tests settings that make the point differ from commbench's."""
    tags = []
    if COLLECTIVE_OPS[op].rooted and line.root != ROOT:
        tags.append(f"root={line.root}")       # commbench's rooted ops use root 0 (ops.ROOT)
    if run.agg_iters > 1:
        tags.append(f"agg_iters={run.agg_iters}")
    if run.blocking:
        tags.append("blocking")
    return ",".join(tags) or "default"   # -u, -R, -a and alltoallv's traffic are parameters (settings_of)


def geometry(run: TestRun) -> tuple[int, int, int]:
    """(world_size, num_nodes, ranks_per_node) from the rank lines."""
    hosts: dict[str, int] = {}
    per_device = run.world_size // max(1, len(run.devices))   # JSON lists one device per process
    for d in run.devices:
        hosts[d.host] = hosts.get(d.host, 0) + per_device
    return run.world_size, len(hosts), max(hosts.values())


def _check_op_columns(op: str, line: ResultLine, program: str | None) -> None:
    """redop and root as nccl-tests prints them for ``op``: rows of another op under this header
    (a pasted table) are refused, not attributed to the wrong op."""
    spec = COLLECTIVE_OPS[op]
    why = None
    if spec.reduces and line.redop == "none":
        why = f"{op} reduces, so nccl-tests prints its reduction (sum, max ...), not 'none'"
    elif op in NO_REDOP and line.redop != "none":
        why = f"nccl-tests prints redop 'none' for {op}, not {line.redop!r}"
    elif spec.rooted and line.root < 0:
        why = f"{op} has a root, so nccl-tests prints it (>= 0), not {line.root}"
    elif not spec.rooted and line.root != -1:
        why = f"{op} has no root, so nccl-tests prints -1, not {line.root}"
    if why:
        raise NcclTestsFormatError(
            f"{line.where}: this row (redop {line.redop!r}, root {line.root}) is not a row of {program}: {why}. "
            f"Rows of another op under this header (a pasted or mixed-up log) cannot be imported.")


def one_rank_note(op: str, side: Side, n: int) -> str | None:
    """Why a bandwidth of a 1-rank point means nothing (None when it does): in place nothing
    moves, so the time is the launch cost and the bandwidth a timer artefact; out of place the
    bus factor (n-1)/n of the all-to-all ops is 0."""
    if n != 1:
        return None
    if side.in_place:
        return (f"1 rank in place: {op} moves no data, so {side.time_us:g} us is the launch cost and "
                f"algbw/busbw would be a timer artefact; they are left empty")
    if metrics.bus_factor(op, 1) == 0:
        return f"1 rank: busbw of {op} is 0 by nccl-tests' factor (n-1)/n; it is left empty (algbw is the copy rate)"
    return None


def _check_size(op: str, line: ResultLine, elem: int, n: int, dtype: str) -> None:
    if op == "alltoallv":   # size: the busiest rank's larger side; count: per peer (0 for a matrix)
        if line.size_bytes % elem:
            raise NcclTestsFormatError(f"{line.where}: size {line.size_bytes} B is not whole {dtype} elements")
        return
    expected = line.count * elem * (n if COLLECTIVE_OPS[op].chunked else 1)
    if line.size_bytes != expected:
        raise NcclTestsFormatError(
            f"{line.where}: size {line.size_bytes} B and count {line.count} disagree for {op} of "
            f"{dtype} on {n} rank(s) (expected {expected} B): the rank lines, the op or the row are wrong.")


def recompute(op: str, side: Side, count: int, elem: int, n: int, where: str,
              size_bytes: int = 0) -> tuple[float | None, float | None]:
    """algbw and busbw from commbench's formulas; the file's must agree to their printed digits.
    alltoallv: algbw is ``size_bytes`` (the busiest rank's larger side, as both tools define it)."""
    if side.time_us <= 0:
        return None, None
    moved = size_bytes if op == "alltoallv" else metrics.algbw_bytes(op, count, elem, n)
    algbw = metrics.gbps(moved, side.time_us)
    busbw = algbw * metrics.bus_factor(op, n)
    rel_time = side.time_half_unit / side.time_us
    for name, ours, theirs, half in (("algbw", algbw, side.algbw_gbps, side.algbw_half_unit),
                                     ("busbw", busbw, side.busbw_gbps, side.busbw_half_unit)):
        tol = BW_SLACK * (half + abs(ours) * rel_time / (1 - rel_time) if rel_time < 1 else float("inf"))
        if abs(ours - theirs) > tol + 1e-12:
            label = "in-place" if side.in_place else "out-of-place"
            raise NcclTestsFormatError(
                f"{where}: {label} {name} is {theirs:g} GB/s in the file but {ours:.4g} GB/s by "
                f"commbench's formula for {op} on {n} rank(s) ({count} elements of {elem} B in "
                f"{side.time_us:g} us): the file's numbers, rank lines or op do not belong together.")
    return algbw, busbw


def status_of(op: str, side: Side, count: int) -> tuple[str, str]:
    """(status, reason) of one side of a result line."""
    if side.wrong is None:
        if side.in_place and no_in_place_reason(op):   # nccl-tests prints N/A for these in place
            return "skipped", (f"nccl-tests does not check in-place {op} (#wrong N/A); commbench has no "
                               f"in-place {op} (send and receive buffers must differ)")
        return "failed", "not checked: nccl-tests printed #wrong N/A (data check off, -c 0)"
    if side.wrong > 0:
        return "wrong", f"{side.wrong} element(s) differ from the expected values (nccl-tests #wrong)"
    if count == 0:
        return "skipped", ("0 elements per rank: nccl-tests rounds each rank's part down to a "
                           "multiple of 16 bytes")
    return "ok", ""


def rows_of(run: TestRun, *, suite: str, bench: str, log: str) -> tuple[list[dict], list[dict]]:
    """Result rows and per-iteration samples of one nccl-tests invocation."""
    from commbench.families import get_family
    from commbench.families.base import Case
    from commbench.runfolder import case_row

    # Every collectives parameter at its default, in the family's order, as a suite that sets
    # only in_place expands them: the case ids then match `commbench run`'s.
    defaults = {name: p.default for name, p in get_family("collectives").params.items()}
    op = op_of(run)
    n, num_nodes, rpn = geometry(run)
    timing = "graph" if run.graph_launches > 0 else "pipelined"
    rows, samples = [], []
    for line in run.lines:
        if line.type_name not in DTYPES:
            raise NcclTestsFormatError(f"{line.where}: unknown nccl-tests data type {line.type_name!r} "
                                       f"(known: {', '.join(DTYPES)})")
        dtype = DTYPES[line.type_name]
        elem = dtypes.size_bytes(dtype)
        _check_op_columns(op, line, run.program)
        _check_size(op, line, elem, n, dtype)
        reduce_op = line.redop if COLLECTIVE_OPS[op].reduces else ""
        settings, registered = settings_of(run, op, elem, line)
        for side in line.sides:
            algbw, busbw = recompute(op, side, line.count, elem, n, line.where, line.size_bytes)
            case = Case(suite=suite, bench=bench, family="collectives", op=op, backend="nccl",
                        variant=variant_of(run, op, line), env=(), dtype=dtype, size_bytes=line.size_bytes,
                        params=tuple({**defaults, **settings, "in_place": side.in_place,
                                      "reduce_op": reduce_op or defaults["reduce_op"]}.items()),
                        warmup=run.warmup_iters, iters=run.iters, timing=timing, ranks=n,
                        ranks_per_node=rpn, timeout_s=0.0)
            row = case_row(case, world_size=n, num_nodes=num_nodes, ranks_per_node=rpn, log=log)
            status, reason = status_of(op, side, line.size_bytes // elem if op == "alltoallv" else line.count)
            note = one_rank_note(op, side, n)
            if note:   # kept as a measured time, but no bandwidth that could headline a report
                busbw = None
                algbw = None if side.in_place else algbw
                reason = reason or note
            row.update(count=line.count, time_us=side.time_us, algbw_gbps=algbw, busbw_gbps=busbw,
                       wrong=side.wrong, status=status, reason=reason, reduce_op=reduce_op,
                       registered=registered, source=SOURCE, source_line=_short_where(line.where, run))
            side_samples = _samples(case.case_id, side, run)
            if side_samples:
                stats = metrics.summarize(reduced_times(side_samples, settings["rank_time"]))
                row.update({k: stats[k] for k in ("time_us_min", "time_us_p90", "time_us_p99", "time_us_max")})
            elif side.iter_min_us is not None:
                row.update(time_us_min=side.iter_min_us, time_us_p99=side.iter_p99_us, time_us_max=side.iter_max_us)
            rows.append(row)
            samples += side_samples
    return rows, samples


def _samples(case_id: str, side: Side, run: TestRun) -> list[dict]:
    """-I per-iteration times (JSON only): one row per process (its slowest GPU) per iteration."""
    if side.per_process_times_us:
        rows = side.per_process_times_us
    elif side.iter_times_us:
        rows = [side.iter_times_us]
    else:
        return []
    out = []
    for proc, times in enumerate(rows):
        dev = run.devices[min(proc, len(run.devices) - 1)]
        out += [{"case_id": case_id, "rank": proc, "host": dev.host, "gpu": f"cuda:{dev.device}",
                 "iteration": i, "time_us": t} for i, t in enumerate(times)]
    return out


def _short_where(where: str, run: TestRun) -> str:
    return where.replace(str(run.path), run.path.name, 1)


def describe(run: TestRun, op: str, log: str) -> dict:
    """What the file says about one invocation, for run.json."""
    n, num_nodes, rpn = geometry(run)
    return {
        "file": str(run.path), "where": _short_where(run.where, run), "format": run.fmt, "log": log,
        "program": run.program, "op": op, "nccl_tests_version": run.version,
        "nccl_headers": version_string(run.nccl_headers), "nccl": version_string(run.nccl_library),
        "command": shlex.join(run.command) if run.command else None,
        "settings": {"nthreads": run.nthreads, "ngpus": run.ngpus, "min_bytes": run.min_bytes,
                     "max_bytes": run.max_bytes, "step": run.step, "warmup_iters": run.warmup_iters,
                     "iters": run.iters, "agg_iters": run.agg_iters, "validation": run.validation,
                     "graph_launches": run.graph_launches, "unalign": run.unalign, "register": run.register,
                     "average": run.average,
                     "blocking": run.blocking, "per_iter_timing": run.per_iter},
        "world_size": n, "num_nodes": num_nodes, "ranks_per_node": rpn,
        "devices": [{"rank": d.rank, "host": d.host, "device": d.device, "pci": d.pci, "name": d.name}
                    for d in run.devices],
        "avg_busbw_gbps": run.avg_busbw_gbps, "out_of_bounds": run.out_of_bounds,
        "start_time": run.start_time, "end_time": run.end_time,
        "errors": [e for e in run.errors if e],
        "results": len(run.lines),
    }


def _joined(values) -> str | None:
    vals = list(dict.fromkeys(v for v in values if v))
    return ", ".join(vals) if vals else None


def build_meta(described: list[dict], envs: list[dict], files: list[Path], suite: str) -> dict:
    from commbench.families import get_family
    from commbench.sysinfo.machine import filtered_env, withheld_env

    env: dict[str, str] = {}
    withheld: set[str] = set()
    for e in envs:
        env.update(filtered_env(e))
        withheld.update(withheld_env(e))
    return {
        "source": SOURCE, "suite": suite,
        "command": _joined(d["command"] for d in described),
        "imported_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "imported_by": shlex.join(["commbench", "import", "nccl-tests", *map(str, files)]),
        "commbench_version": __version__,
        "hosts": sorted({dev["host"] for d in described for dev in d["devices"]}),
        "gpus": list(dict.fromkeys(dev["name"] for d in described for dev in d["devices"])),
        "nccl": _joined(d["nccl"] for d in described),
        "nccl_tests_version": _joined(d["nccl_tests_version"] for d in described),
        "env": env,
        "env_withheld": sorted(withheld),   # names only: they look like credentials
        "param_columns": {"collectives": list(get_family("collectives").params)},
        "nccl_tests": described,
    }


def _log_name(path: Path, used: set[str]) -> str:
    name, k = path.name, 1
    while name in used:
        k += 1
        name = f"{path.stem}-{k}{path.suffix}"
    used.add(name)
    return name


def _log_bytes(path: Path, runs: list[TestRun]) -> bytes:
    """The file as kept in logs/: verbatim, except a -J file's environment, which is filtered."""
    data = path.read_bytes()
    if not runs or runs[0].fmt != "json":
        return data
    from commbench.sysinfo.machine import filtered_env

    doc = json.loads(data)
    doc["env"] = [f"{k}={v}" for k, v in filtered_env(runs[0].env or {}).items()]
    return (json.dumps(doc, indent=1) + "\n").encode()


def convert(files: list[Path], *, suite: str = SOURCE, bench: str = SOURCE, machine: Path | None = None):
    """Parse and check every file; return (rows, samples, meta, logs) without writing anything.
    ``machine`` (an info --json file or a run folder of the host the files ran on): its links go
    into run.json and every row gets its bound (bound_gbps, pct_of_bound; analysis/bounds.py)."""
    rows, samples, described, envs, logs = [], [], [], [], []
    seen: dict[str, tuple[str, str]] = {}
    used: set[str] = set()
    given: dict[tuple[int, int], Path] = {}
    for path in map(Path, files):
        first_name = given.setdefault(file_identity(path), path)
        if first_name is not path:
            raise ImportError_(
                f"{path}: given twice (the same file as {first_name}): each nccl-tests run is imported once; "
                f"put repeated measurements of one point into separate folders.")
    for path in map(Path, files):
        runs = read(path)
        log_name = _log_name(path, used)
        log = f"logs/{log_name}"
        for run in runs:
            r, s = rows_of(run, suite=suite, bench=bench, log=log)
            for row in r:
                first = seen.setdefault(row["case_id"], (log, row["source_line"]))[1]
                if seen[row["case_id"]] != (log, row["source_line"]):
                    raise ImportError_(
                        f"{row['source_line']}: repeats the point of {first} ({row['op']}, "
                        f"{row['size_bytes']} B {row['dtype']}, in_place={row['in_place']}, timing "
                        f"{row['timing']}, {row['world_size']} rank(s)). Import each nccl-tests run "
                        f"once (a text log and its -J file are the same run); put repeated measurements "
                        f"of one point into separate folders.")
            rows += r
            samples += s
            described.append(describe(run, op_of(run), log))
            envs.append(run.env or {})
        logs.append((log_name, _log_bytes(path, runs)))
    if not rows:
        raise ImportError_(f"{', '.join(map(str, files))}: no result rows to import.")
    meta = build_meta(described, envs, list(files), suite)
    if machine is not None:
        from .nccl_tests.machine import fill_bounds, load_machine

        found = load_machine(machine, meta["hosts"])
        meta.update(links=found["links"], machine_from=found["from"], hostname=found["hostname"])
        fill_bounds(rows, found["links"])
    return rows, samples, meta, logs


def _check_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ImportError_(f"{out} already exists and is not an empty folder: choose another --out "
                           f"(an import never overwrites a run folder).")


def write_run_folder(out: Path, rows: list[dict], samples: list[dict], meta: dict,
                     logs: list[tuple[str, bytes]]) -> Path:
    """Write the run folder under a temporary name next to ``out``, then rename it into place."""
    from commbench.runfolder import RunFolder

    out = Path(out)
    _check_out(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    except OSError as exc:
        raise ImportWriteError(f"{out}: cannot create the run folder ({exc.strerror or exc}): choose another "
                               f"--out.") from None
    try:
        os.chmod(tmp, 0o755)
        folder = RunFolder(tmp)
        folder.create(resume=False)
        for row in rows:
            folder.append_row(row)
        if samples:
            folder.append_samples(samples)
        folder.write_meta(meta)
        for name, data in logs:
            (tmp / "logs" / name).write_bytes(data)
        _check_out(out)          # someone may have written there meanwhile
        os.rename(tmp, out)      # atomic; replaces an empty folder
    except (OSError, StorageFull) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        err = exc if isinstance(exc, OSError) else exc.__context__
        why = getattr(err, "strerror", None) or str(exc)
        raise ImportWriteError(f"{out}: cannot write the imported run folder ({why}); nothing was left behind: "
                               f"free space or choose another --out.") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def default_out() -> Path:
    from commbench.runfolder import utc_stamp

    return Path("results") / f"{utc_stamp()}-{SOURCE}"


def import_files(files, out: Path | None = None, *, bench: str = SOURCE, suite: str = SOURCE,
                 machine: Path | None = None):
    """Import nccl-tests outputs into a new run folder; return (folder, rows)."""
    rows, samples, meta, logs = convert(list(files), suite=suite, bench=bench, machine=machine)
    folder = write_run_folder(Path(out) if out is not None else default_out(), rows, samples, meta, logs)
    return folder, rows
