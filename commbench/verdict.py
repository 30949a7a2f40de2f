"""The exit status of `commbench run` from its stored rows (README, "Exit status")."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

STATUSES = ("ok", "skipped", "wrong", "failed", "timeout")
FAILING = ("wrong", "failed", "timeout")


def run_exit_status(run_dir: Path) -> tuple[int, str]:
    """(0 or 1, a one-line summary): 1 when any row is wrong/failed/timeout or no row is ok.

    Skipped rows (a Case this machine cannot run, with the reason) never fail a run by themselves,
    but a run that measured nothing at all is not a pass."""
    from .runfolder.reader import RunFolderError, load

    try:
        statuses = Counter(str(s) for s in load(run_dir)["status"])
    except (RunFolderError, KeyError):
        statuses = Counter()
    counts = ", ".join(f"{statuses.get(s, 0)} {s}" for s in STATUSES)
    bad = sum(statuses.get(s, 0) for s in FAILING)
    if bad:
        return 1, f"{counts}: {bad} Case(s) not correct or not finished -> exit 1"
    if not statuses.get("ok"):
        return 1, f"{counts}: nothing was measured -> exit 1"
    return 0, f"{counts} -> exit 0"


def run_exit_status_all_ranks(run_dir: Path) -> tuple[int, str]:
    """As run_exit_status; inside an MPI job rank 0 decides and every rank exits the same way
    (other nodes may not see the run folder)."""
    from .world import inside_mpi_job

    if not inside_mpi_job():
        return run_exit_status(run_dir)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    return comm.bcast(run_exit_status(run_dir) if comm.Get_rank() == 0 else None, root=0)
