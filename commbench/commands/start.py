"""How the commands that measure start a Run and end: a batch system's SIGTERM stops like Ctrl-C
(exit 130, every row measured so far kept), a failing filesystem is exit 1 with the folder named."""
from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from pathlib import Path

import click


def _terminate(signum, frame):  # a batch system's SIGTERM: stop like Ctrl-C
    raise KeyboardInterrupt


@contextmanager
def stopping_cleanly(resume_hint: str = " (continue with --resume)"):
    """Around a run: SIGTERM as Ctrl-C; an interrupt exits 130, a filesystem failure exits 1."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    except KeyboardInterrupt:
        click.echo(f"commbench: interrupted; every row measured so far is in the run folder{resume_hint}",
                   err=True)
        sys.exit(130)
    except OSError as exc:   # the run folder's filesystem failed mid-run (a full disk is StorageFull)
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"commbench: error: {where}{exc.strerror or exc}; the run stopped. Every Case stored so "
                   f"far is kept{resume_hint}", err=True)
        sys.exit(1)
    finally:
        signal.signal(signal.SIGTERM, previous)


def execute(suite, out: Path | None, *, resume: bool = False, force: bool = False,
            overrides: dict | None = None, quiet: bool = False, finish=None, before_finish=None,
            accept: bool = False, share_gpu: bool = False) -> Path:
    """One Run of ``suite`` (a loaded Suite) into ``out``; the run folder. ``finish`` (default: plots,
    summary, report) runs once every row is stored; ``before_finish(folder)`` just before it (a
    burn-in stamps its pass). ``accept``: the preflight fails a node short of the suite's shape
    (exit 1) instead of skipping what it cannot run; ``share_gpu``: `--share-gpu`."""
    from ..analysis.finish import finish as default_finish
    from ..launch.extras import require_run_extras
    from ..launch.run import Run, RunOptions

    require_run_extras()
    end = finish or default_finish
    if before_finish is not None:
        def end_pass(folder, console, end=end):
            before_finish(folder)
            end(folder, console)
        end = end_pass
    options = RunOptions(resume=resume, force=force, overrides=overrides, show_progress=not quiet, finish=end,
                         accept=accept, share_gpu=share_gpu)
    return Path(Run.execute(suite, out, options))


def print_verdict(run_dirs: list[Path], shown_dir: Path, summary_fix=None) -> int:
    """`run`'s last lines (rank 0 only inside an MPI job): busy warnings, the run folder, the
    summary; the exit status the rows imply (``summary_fix(code, summary)`` may amend both)."""
    from ..verdict import busy_warnings_all_ranks, run_exit_status_all_ranks
    from ..world import launcher_rank

    code, summary = run_exit_status_all_ranks(run_dirs)
    if summary_fix is not None:
        code, summary = summary_fix(code, summary)
    for warning in busy_warnings_all_ranks(run_dirs):
        click.echo(f"commbench: warning: {warning}", err=True)
    if launcher_rank() in (None, 0):   # inside an MPI job: one summary, from rank 0
        click.echo(f"run folder: {shown_dir}")
        click.echo(f"commbench: {summary}")
    return code
