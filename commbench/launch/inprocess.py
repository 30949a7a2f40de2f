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
from ..runner import Progress, run_cases
from ..world import build_world, slurm_step_tasks
from .extras import require_torch_for
from .prepare import (close_meta, open_meta, prepare_folder, record_unsupported, settled_row,
                      variant_env)
from ..safety import launch_env

LOG = "logs/inprocess.log"


def _root_prepares(world, suite, out_dir: Path | None, resume: bool,
                   overrides: dict | None = None, force: bool = False) -> RunFolder:
    """Rank 0 creates the folder; every rank gets its path or the same error (never a hang)."""
    result = None
    if world.is_root:
        try:
            folder = prepare_folder(suite, out_dir, resume)
            meta = open_meta(folder, suite, resume=resume, overrides=overrides, force=force,
                             own_ranks=world.local_size)
            meta["hosts"] = sorted(set(world.hosts))
            folder.write_meta(meta)
            result = ("ok", str(folder.path))
        except Exception as exc:  # noqa: BLE001 - every rank must learn of it
            result = ("error", str(exc))
    status, value = world.bcast(result)
    if status != "ok":
        raise CommbenchError(value)
    return RunFolder(Path(value))


def pmi_mismatch(world_size: int) -> str | None:
    """The one message for tasks that srun started without a PMI their MPI speaks."""
    tasks = slurm_step_tasks()
    if world_size != 1 or tasks <= 1:
        return None
    from .srun import mpi_library, pmi_preference

    library = (mpi_library() or "the MPI that mpi4py uses").split(",")[0]
    speaks = pmi_preference(library)
    used = os.environ.get("SLURM_MPI_TYPE") or "the site's MpiDefault"
    return (f"srun started {tasks} tasks, but each sees an MPI world of 1: srun's PMI ({used}) is "
            f"not one {library} speaks ({', '.join(speaks)}). Start them with `srun --mpi={speaks[0]}` "
            f"(or export SLURM_MPI_TYPE={speaks[0]}; `srun --mpi=list` shows what this Slurm has, "
            f"`commbench info --srun-mpi` the one that works here), or run commbench once inside the "
            f"allocation without srun so it starts the ranks itself (slurm/README.md).")


def check_job_shape(world, suite) -> None:
    """Stop at start, on every rank with the same message, when this job cannot run the suite:
    a PMI mismatch, or no launch group whose rank count is the job's size."""
    problem = pmi_mismatch(world.size)
    if problem is None and any(l.search for l in suite.launches):
        problem = ("placement: search starts a launch per group of hosts, wave by wave: run commbench "
                   "outside mpiexec/srun (inside the allocation) so it starts them itself.")
    if problem is None and suite.launches and all(l.ranks != world.size for l in suite.launches):
        wanted = sorted({l.ranks for l in suite.launches})
        problem = (f"this MPI job has {world.size} rank(s) and suite {suite.path} asks for "
                   f"{', '.join(map(str, wanted))}: nothing could run. Start it with "
                   f"{wanted[0]} ranks (srun -n / mpiexec -n), set `ranks:` to the job's size (`ranks: "
                   f"all` means every task of the allocation), or run commbench outside the job's "
                   f"steps so it starts each launch group with its own rank count.")
    if problem:
        raise CommbenchError(problem)


def run_suite_inside_mpi(suite, out_dir: Path | None, options) -> Path:
    """Run the suite in this job's ranks; rank 0 stores and then calls ``options.finish(folder, None)``
    (``options``: the Run's RunOptions)."""
    require_torch_for(suite)
    world = build_world()
    check_job_shape(world, suite)
    folder = _root_prepares(world, suite, out_dir, options.resume, options.overrides, options.force)
    done = set()
    if world.is_root:
        done = folder.done_case_ids() if options.resume else set()
        done |= record_unsupported(folder, suite, done)
    done = world.bcast(done)
    by_id = {c.case_id: c for c in suite.cases}
    on_row = _progress_lines(world, suite, by_id, done) if options.show_progress else None
    measured_env = None
    for launch in suite.launches:
        cases = [by_id[cid] for cid in launch.case_ids if cid not in done]
        if not cases:
            continue
        reason = _why_not_here(world, launch, measured_env)
        if reason:
            if world.is_root:
                for c in cases:
                    folder.append_row(settled_row(c, "skipped", reason, LOG, launch.ranks))
            continue
        measured_env = (launch.env, launch.nccl_profile)   # NCCL loads a profiler plugin once, too
        _measure_launch(world, folder, launch, cases, on_row)
    pids = set(world.allgather(os.getpid()))   # our own ranks are not "other GPU processes"
    if world.is_root:
        meta = folder.read_meta()
        close_meta(meta, exclude_pids=pids)
        folder.write_meta(meta)
        if options.finish is not None:
            options.finish(folder, None)
    return folder.path


def _progress_lines(world, suite, by_id: dict, done: set):
    """Rank 0's one line per Case (batch logs), as a row callback; None on other ranks."""
    if not world.is_root:
        return None
    from ..ui import CaseLines, describe_case, headline

    lines = CaseLines(sum(cid not in done for l in suite.launches if l.ranks == world.size
                          for cid in l.case_ids))

    def on_row(row: dict) -> None:
        lines.case_done(describe_case(by_id[row["case_id"]], row), str(row.get("status")), headline(row))
    return on_row


def _why_not_here(world, launch, measured_env) -> str | None:
    """Why this job's processes cannot measure ``launch`` honestly, or None."""
    if launch.ranks != world.size:
        return f"needs {launch.ranks} ranks; this MPI job has {world.size} (start it with -n {launch.ranks})"
    if measured_env is not None and (launch.env, launch.nccl_profile) != measured_env:
        return ("environment variants (and NCCL profiling: a plugin NCCL loads once) need fresh "
                "processes (NCCL/NVSHMEM read their environment once): run commbench outside "
                "mpiexec/srun so it starts one job per variant")
    return None


def _measure_launch(world, folder: RunFolder, launch, cases: list, on_row) -> None:
    """The launch's Cases in these processes, under the launch's environment (restored after), with
    the node's GPU health recorded around them as a launched rank records it."""
    from .health_probe import begin

    allow_mc = any(c.param("allow_multicast") for c in cases)
    saved = dict(os.environ)
    # the launch's environment is built from this process's before it replaces it (built after
    # a clear, it lost PATH, COMMBENCH_JIT_CACHE and every forwarded variable: nvcc then found
    # no cc1plus and kernels were cached under ~/.cache)
    ranks_env = launch_env(folder.path, variant_env(folder, launch, cases), allow_mc)
    os.environ.clear()
    os.environ.update(ranks_env)

    def on_bound(record: dict) -> None:   # rank 0: how the ranks share GPUs, into run.json
        meta = folder.read_meta()
        meta.setdefault("gpu_binding", {})[f"inprocess-{launch.launch_id}"] = record
        folder.write_meta(meta)

    health = begin(folder.path, {"launch_id": launch.launch_id, "hosts": list(launch.hosts)}, world)
    try:
        run_cases(cases, world, folder, LOG, Progress(folder.path / "logs" / "inprocess.progress.jsonl"),
                  on_row=on_row, on_bound=on_bound)
    finally:
        health.end()
        os.environ.clear()
        os.environ.update(saved)
