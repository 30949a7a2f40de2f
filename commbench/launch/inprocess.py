"""Inside an MPI job (`mpiexec -n 8 commbench run suite.yaml`): this process is a rank.

Launch groups run in these same processes, one after another. NCCL and NVSHMEM
read their environment once per process, so only one environment can be
measured honestly: the first launch group's. Groups with another environment,
or another rank count, are recorded as skipped with the reason. Multicast is
switched off unless a Case of the group opted in, exactly as in launcher mode.
There is no watchdog here: the job scheduler's time limit is the backstop.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import CommbenchError
from ..runfolder import RunFolder
from ..measure.runner import Progress, run_cases
from ..suite import load_suite
from ..world import build_world
from .finish import finish
from .prepare import (base_meta, now_utc, overrides_meta, prepare_folder, record_unsupported, resume_meta,
                      settled_row, write_plan)
from .safety import launch_env

LOG = "logs/inprocess.log"


def _root_prepares(world, suite, out_dir: Path | None, resume: bool,
                   overrides: dict | None = None) -> RunFolder:
    """Rank 0 creates the folder; every rank gets its path or the same error (never a hang)."""
    result = None
    if world.is_root:
        try:
            folder = prepare_folder(suite, out_dir, resume)
            write_plan(folder, suite, resume=resume)
            previous = folder.read_meta() if resume else {}
            started = now_utc()
            meta = base_meta(suite, started)
            overrides_meta(meta, previous, overrides)
            resume_meta(meta, previous, started)
            meta["hosts"] = sorted(set(world.hosts))
            folder.write_meta(meta)
            result = ("ok", str(folder.path))
        except Exception as exc:  # noqa: BLE001 - every rank must learn of it
            result = ("error", str(exc))
    status, value = world.bcast(result)
    if status != "ok":
        raise CommbenchError(value)
    return RunFolder(Path(value))


def run_suite_inside_mpi(suite_path: Path, out_dir: Path | None, *, resume: bool,
                         overrides: dict | None = None, limits=None) -> Path:
    world = build_world()
    suite = load_suite(suite_path, overrides=overrides, limits=limits)
    folder = _root_prepares(world, suite, out_dir, resume, overrides)
    done = set()
    if world.is_root:
        done = folder.done_case_ids() if resume else set()
        done |= record_unsupported(folder, suite, done)
    done = world.bcast(done)
    by_id = {c.case_id: c for c in suite.cases}
    measured_env = None
    for launch in suite.launches:
        cases = [by_id[cid] for cid in launch.case_ids if cid not in done]
        if not cases:
            continue
        reason = None
        if launch.ranks != world.size:
            reason = (f"needs {launch.ranks} ranks; this MPI job has {world.size} "
                      f"(start it with -n {launch.ranks})")
        elif measured_env is not None and launch.env != measured_env:
            reason = ("environment variants need fresh processes (NCCL/NVSHMEM read their environment "
                      "once): run commbench outside mpiexec/srun so it starts one job per variant")
        if reason:
            if world.is_root:
                for c in cases:
                    folder.append_row(settled_row(c, "skipped", reason, LOG, launch.ranks))
            continue
        measured_env = launch.env
        allow_mc = any(c.param("allow_multicast") for c in cases)
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(launch_env(folder.path, dict(launch.env), allow_mc))
        try:
            run_cases(cases, world, folder, LOG, Progress(folder.path / "logs" / "inprocess.progress.jsonl"))
        finally:
            os.environ.clear()
            os.environ.update(saved)
    world.barrier()
    if world.is_root:
        meta = folder.read_meta()
        meta["finished_utc"] = now_utc()
        folder.write_meta(meta)
        finish(folder, None)
    return folder.path
