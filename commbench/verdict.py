"""The exit status of `commbench run` from its stored rows (README, "Exit status")."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from .runfolder.schema import FAILING, STATUSES


def _statuses(run_dir: Path) -> Counter:
    from .runfolder.reader import RunFolderError, load

    try:
        return Counter(str(s) for s in load(run_dir)["status"])
    except (RunFolderError, KeyError):
        return Counter()


def run_exit_status(run_dirs) -> tuple[int, str]:
    """(0 or 1, a one-line summary): 1 when any row is wrong/failed/timeout or no row is ok.

    ``run_dirs``: one run folder or several (the repeats of `run --repeat`; counts are summed).
    Skipped rows (a Case this machine cannot run, with the reason) never fail a run by themselves,
    but a run that measured nothing at all is not a pass."""
    dirs = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
    statuses = Counter()
    for d in dirs:
        statuses += _statuses(Path(d))
    counts = ", ".join(f"{statuses.get(s, 0)} {s}" for s in STATUSES)
    if len(dirs) > 1:
        counts += f" over {len(dirs)} repeats"
    bad = sum(statuses.get(s, 0) for s in FAILING)
    if bad:
        return 1, f"{counts}: {bad} Case(s) not correct or not finished -> exit 1"
    if not statuses.get("ok"):
        return 1, f"{counts}: nothing was measured -> exit 1"
    return 0, f"{counts} -> exit 0"


def busy_warnings(run_dirs) -> list[str]:
    """One line per run folder whose machine was busy (run.json's machine_load)."""
    from .runfolder.reader import RunFolderError, read_meta
    from .sysinfo.load import describe

    out = []
    for d in [run_dirs] if isinstance(run_dirs, (str, Path)) else run_dirs:
        try:
            line = describe(str(d), read_meta(d))
        except RunFolderError:
            line = None
        if line:
            out.append(line)
    return out


def _root_decides(fn, run_dirs):
    """fn(run_dirs) on rank 0 of an MPI job, the same answer on every rank (other nodes may not
    see the run folder); plainly outside MPI."""
    from .world import inside_mpi_job

    if not inside_mpi_job():
        return fn(run_dirs)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    return comm.bcast(fn(run_dirs) if comm.Get_rank() == 0 else None, root=0)


def run_exit_status_all_ranks(run_dirs) -> tuple[int, str]:
    """As run_exit_status; inside an MPI job rank 0 decides and every rank exits the same way."""
    return _root_decides(run_exit_status, run_dirs)


def busy_warnings_all_ranks(run_dirs) -> list[str]:
    """As busy_warnings, decided on rank 0; only rank 0 of an MPI job gets the lines to print."""
    from .world import inside_mpi_job

    lines = _root_decides(busy_warnings, run_dirs)
    if inside_mpi_job():
        from mpi4py import MPI

        return lines if MPI.COMM_WORLD.Get_rank() == 0 else []
    return lines
