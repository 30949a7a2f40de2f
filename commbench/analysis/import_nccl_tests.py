"""`commbench import nccl-tests`: nccl-tests outputs -> one run folder with commbench's columns.

Each result line becomes two rows keyed as a `commbench run` keys the same point
(nccl_tests/rows.py), so `report`, `compare` and `accept` work on them unchanged
(docs/import.md). Everything is parsed and checked before anything is written;
the folder appears whole or not at all.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from commbench import __version__
from commbench.errors import CommbenchError, StorageFull

from .nccl_tests import TestRun, file_identity, read, version_string
from .nccl_tests.rows import SOURCE, short_where, geometry, op_of, rows_of, variant_of

__all__ = ["ImportError_", "ImportWriteError", "SOURCE", "build_meta", "convert", "describe", "geometry",
           "import_files", "op_of", "rows_of", "variant_of", "write_run_folder"]


class ImportError_(CommbenchError):
    """The import cannot proceed (output folder taken, repeated points)."""


class ImportWriteError(CommbenchError):
    """The run folder could not be written (full disk, read-only folder): nothing was left."""

    exit_code = 1   # not bad input: the import failed


def describe(run: TestRun, op: str, log: str) -> dict:
    """What the file says about one invocation, for run.json."""
    n, num_nodes, rpn = geometry(run)
    return {
        "file": str(run.path), "where": short_where(run.where, run), "format": run.fmt, "log": log,
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
