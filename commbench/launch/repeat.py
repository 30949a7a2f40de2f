"""`run --repeat N`: the suite N times back to back, each a complete run folder OUT/repeat-k
(docs/results.md), so `compare` can tell a change from the run-to-run noise of the machine."""
from __future__ import annotations

from pathlib import Path

from ..errors import CommbenchError
from ..world import inside_mpi_job

REPEAT_PREFIX = "repeat-"   # the same name commbench.analysis.runsets reads


def repeat_folders(out: Path, n: int) -> list[Path]:
    return [Path(out) / f"{REPEAT_PREFIX}{k}" for k in range(1, n + 1)]


def on_root(fn):
    """fn() once, on rank 0 of an MPI job (every rank gets its result or the same error), or
    plainly outside one: ranks must not race to look at folders rank 0 is creating."""
    if not inside_mpi_job():
        return fn()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    outcome = None
    if comm.Get_rank() == 0:
        try:
            outcome = ("ok", fn())
        except CommbenchError as exc:
            outcome = ("error", str(exc))
    status, value = comm.bcast(outcome, root=0)
    if status == "error":
        raise CommbenchError(value)
    return value


def default_out(suite, out: Path | None, resume: bool, flag: str, what: str) -> Path:
    """``out``, or a new folder under the default results when none was given; a --resume or an MPI
    job (whose ranks would each pick their own) needs ``--out``: ``what`` says what it names."""
    if out is not None:
        return Path(out)
    if resume or inside_mpi_job():
        raise CommbenchError(f"{flag} with --resume, or inside an MPI job, needs --out: {what}.")
    from ..runfolder import new_run_dir
    from .prepare import DEFAULT_RESULTS

    return new_run_dir(DEFAULT_RESULTS, suite.name)


def _check(out: Path, n: int, resume: bool) -> None:
    if out.exists() and (out / "results.csv").exists():
        raise CommbenchError(f"{out} is a run folder; --repeat needs a folder for repeat-1 ... repeat-{n} "
                             "(choose another --out).")
    if out.exists() and not resume and any(p.exists() for p in repeat_folders(out, n)):
        raise CommbenchError(f"{out} already holds repeats: pass --resume to continue them, or choose "
                             "another --out.")
    out.mkdir(parents=True, exist_ok=True)


def run_repeats(suite, out: Path | None, n: int, *, resume: bool, run_one) -> list[Path]:
    """Run the Suite ``suite`` ``n`` times; ``run_one(out_dir, resume)`` runs one repeat. A --resume
    continues the repeats that exist and starts the ones that do not."""
    out = default_out(suite, out, resume, "--repeat", "the folder that holds (or will hold) "
                      "repeat-1 ... repeat-N")
    on_root(lambda: _check(out, n, resume))
    done = []
    for folder in repeat_folders(out, n):
        again = on_root(lambda f=folder: resume and f.exists() and any(f.iterdir()))
        done.append(Path(run_one(folder, again)))
    return done
