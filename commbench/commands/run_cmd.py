"""`commbench run SUITE`: the suite loaded once, checked, and measured as one Run (or as a burn-in
of passes, or as N repeats), then the exit status its rows imply."""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import CommbenchError
from .options import load, overrides_of, price_options, share_gpu_option, suite_options


@click.command("run")
@click.argument("suite", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="run folder (default results/<UTC time>-<suite name>)")
@click.option("--resume", is_flag=True, help="continue the run folder, skipping Cases already finished")
@click.option("--force", is_flag=True,
              help="with --resume: continue even when the suite file, --set or --only differ from the "
                   "folder's (the mix is recorded in run.json)")
@click.option("--repeat", type=click.IntRange(1, 100), default=1, show_default=True, metavar="N",
              help="run the suite N times back to back (OUT/repeat-1 ... repeat-N), so `compare` can "
                   "tell a change from the machine's run-to-run noise")
@click.option("--duration", default=None, metavar="DURATION",
              help="burn-in: run the suite pass after pass for this long (8h, 30m, 90s), into one "
                   "folder; the suite key `duration` sets it too")
@click.option("--dry-run", is_flag=True,
              help="print the Cases, launches and waves (priced with --launch-cost/--estimate-from); run nothing")
@price_options
@click.option("--quiet", is_flag=True, help="no live progress display")
@suite_options
@share_gpu_option
@click.option("--profile", "profile", type=click.Choice(["torch", "nccl"]), default=None,
              help="profile every benchmark's timed batch: torch (torch.profiler traces in traces/) or nccl "
                   "(commbench's NCCL profiler plugin: per-channel kernel time, algorithm, proxy steps); "
                   "the same as the suite key `profile` (docs/profiling.md)")
def run_cmd(suite: Path, out: Path | None, resume: bool, force: bool, repeat: int, duration: str | None,
            dry_run: bool, launch_cost: str | None, estimate_from: Path | None, quiet: bool,
            sets: tuple[str, ...], only: tuple[str, ...], profile: str | None, max_cases: int | None,
            max_ranks: int | None, share_gpu: bool = False):
    """Run a suite: every Case measured, checked and stored in a run folder."""
    if (launch_cost or estimate_from) and not dry_run:
        raise click.UsageError("--launch-cost and --estimate-from price a --dry-run")
    if force and not resume:
        raise CommbenchError("--force only applies to --resume (it lets a resume mix settings).")
    duration_s = _cli_duration_s(duration)   # bad flags refused before the suite is read
    overrides = overrides_of(sets, only, profile)
    s = load(suite, overrides, max_cases, max_ranks)
    if duration_s is None:
        duration_s = s.settings.duration_s
    if duration_s is not None and repeat > 1:
        raise CommbenchError("--repeat and a burn-in duration do not go together: a burn-in already runs "
                             "the suite again and again (into one folder, pass by pass).")
    if dry_run:
        schedule = schedule_of(s, launch_cost, estimate_from)   # a bad price is refused before any output
        print_plan(s)
        for line in schedule:
            click.echo(line)
        return
    raise SystemExit(_measure(s, out, resume, force, overrides, quiet, repeat, duration_s, share_gpu))


def _measure(s, out: Path | None, resume: bool, force: bool, overrides: dict, quiet: bool, repeat: int,
             duration_s: float | None, share_gpu: bool = False) -> int:
    from .start import execute, print_verdict, stopping_cleanly

    def run_one(out_dir, again, before_finish=None):
        return execute(s, out_dir, resume=again, force=force, overrides=overrides, quiet=quiet,
                       before_finish=before_finish, share_gpu=share_gpu)

    with stopping_cleanly():
        if duration_s is not None:
            from ..launch.burnin import burnin_exit_status, run_burnin

            burnin_dir, passes = run_burnin(s, out, duration_s, resume=resume, run_one=run_one)
            return print_verdict([burnin_dir], burnin_dir,
                                 lambda code, summary: burnin_exit_status(burnin_dir, passes, code, summary))
        if repeat > 1:
            from ..launch.repeat import run_repeats

            run_dirs = run_repeats(s, out, repeat, resume=resume, run_one=run_one)
            return print_verdict(run_dirs, run_dirs[0].parent)
        run_dir = run_one(out, resume)
    return print_verdict([run_dir], run_dir)


def _cli_duration_s(duration: str | None) -> float | None:
    """--duration in seconds (None when not given); a bad value is exit 2 naming the flag."""
    if duration is None:
        return None
    from ..suite.settings import parse_time_limit

    try:
        return parse_time_limit(duration)
    except ValueError as exc:
        raise CommbenchError(f"--duration: {exc}") from None


def print_schedule(s, launch_cost: str | None, estimate_from: Path | None) -> None:
    """The waves a run of suite ``s`` takes and, when priced, its projected wall time."""
    for line in schedule_of(s, launch_cost, estimate_from):
        click.echo(line)


def schedule_of(s, launch_cost: str | None, estimate_from: Path | None) -> list[str]:
    """The schedule's lines; a bad --launch-cost or --estimate-from is exit 2 naming the flag."""
    from ..launch.waves import price

    try:
        return price(s.launches, launch_cost, estimate_from)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--launch-cost") from None


def print_plan(s) -> None:
    """The Cases and launches of suite ``s`` as a table (`run --dry-run`)."""
    from rich.table import Table

    from ..ui import make_console

    console = make_console()
    table = Table(title=f"{s.name}: {len(s.cases)} cases in {len(s.launches)} launch(es)")
    for col in ("launch", "ranks", "variant", "cases"):
        table.add_column(col, overflow="fold")
    table.add_column("ops", ratio=1)        # comma lists wrap between names, never inside one
    table.add_column("backends", ratio=1)
    by_id = {c.case_id: c for c in s.cases}
    for l in s.launches:
        cs = [by_id[i] for i in l.case_ids]
        table.add_row(str(l.launch_id), str(l.ranks), l.variant, str(len(cs)),
                      ", ".join(dict.fromkeys(c.op for c in cs)), ", ".join(dict.fromkeys(c.backend for c in cs)))
    console.print(table)
