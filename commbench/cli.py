"""The `commbench` command: thin click commands over the modules that do the work.

Each command imports what it needs when it runs (rich, pandas, torch, matplotlib), so
`commbench --help` and `validate` start in well under 0.2 s."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from .errors import CommbenchError


class _Group(click.Group):
    """Turns CommbenchError into a one-paragraph message and its exit status (2: bad input), no
    traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except CommbenchError as exc:
            from .world import launcher_rank

            if launcher_rank() in (None, 0):   # one message per job, not one per rank
                click.echo(f"commbench: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, click.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:   # the last line of defence: a message, never a traceback
            if os.environ.get("COMMBENCH_DEBUG"):
                raise
            from .errors import preview

            click.echo(f"commbench: error: unexpected {type(exc).__name__}: {preview(str(exc), 300, quote=False)} "
                       "(this is a bug in commbench: rerun with COMMBENCH_DEBUG=1 for the traceback and report "
                       "it with the input; rows already measured are in the run folder)", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.version_option(package_name="commbench")
def cli():
    """GPU communication benchmarks: NCCL, NVSHMEM, MPI, proxies, MoE, checked and plotted."""


def _limit_options(fn):
    """--max-cases and --max-ranks: lift the expansion limits (docs/suites.md, "Limits")."""
    fn = click.option("--max-ranks", type=click.IntRange(min=1), default=None, metavar="N",
                      help="allow launches of up to N ranks, beyond what the launcher can start "
                           "(default: the CPUs/GPUs of this host, the MPI job or the Slurm allocation)")(fn)
    # the default lives in suite/limits.py (not imported here: `--help` stays fast)
    return click.option("--max-cases", type=click.IntRange(min=1), default=None, metavar="N",
                        help="refuse a suite that expands to more than N Cases (default 20000)")(fn)


def _limits(max_cases: int | None, max_ranks: int | None):
    from .suite.limits import DEFAULT_MAX_CASES, SuiteLimits

    return SuiteLimits(max_cases=max_cases or DEFAULT_MAX_CASES, max_ranks=max_ranks)


def _price_options(fn):
    """--launch-cost / --estimate-from: what a --dry-run's schedule is priced with."""
    fn = click.option("--estimate-from", type=click.Path(path_type=Path, exists=True, file_okay=False),
                      default=None, metavar="RUN",
                      help="with --dry-run: price the schedule from a previous run folder (the median "
                           "launch wall time less its Cases, and each Case's time)")(fn)
    return click.option("--launch-cost", default=None, metavar="DURATION",
                        help="with --dry-run: the cost of one launch (e.g. 15s) for the projected wall time")(fn)


@cli.command()
@click.argument("suite", type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="run folder (default results/<UTC time>-<suite name>)")
@click.option("--resume", is_flag=True, help="continue the run folder, skipping Cases already finished")
@click.option("--force", is_flag=True,
              help="with --resume: continue even when the suite, --set or --only differ from the "
                   "run folder's (run.json records both)")
@click.option("--repeat", type=click.IntRange(1, 100), default=1, show_default=True, metavar="N",
              help="run the suite N times back to back into OUT/repeat-1 ... OUT/repeat-N; "
                   "`compare` reads the folder and tells change from run-to-run noise")
@click.option("--duration", default=None, metavar="DURATION",
              help="burn-in: run the suite pass after pass into one run folder until DURATION (8h, 30m, "
                   "90s) is over, every row stamped with its pass; the same as the suite key `duration`")
@click.option("--dry-run", is_flag=True,
              help="validate and print the Cases, launches and the schedule of waves; run nothing")
@_price_options
@click.option("--quiet", is_flag=True, help="no live progress display")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="override a key in every benchmark, e.g. --set ranks=2 --set sizes=[1MiB] "
                   "--set params.num_sms=16 (recorded in run.json)")
@click.option("--only", "only", multiple=True, metavar="BENCH",
              help="run only the named benchmark(s) of the suite (repeatable; recorded in run.json)")
@click.option("--profile", "profile", type=click.Choice(["torch", "nccl"]), default=None,
              help="profile every benchmark's timed batch: torch (torch.profiler traces in traces/) or nccl "
                   "(commbench's NCCL profiler plugin: kernel_us, channels, algorithm, proxy steps); "
                   "the same as the suite key `profile` (docs/profiling.md)")
@_limit_options
def run(suite: Path, out: Path | None, resume: bool, force: bool, repeat: int, duration: str | None,
        dry_run: bool, launch_cost: str | None, estimate_from: Path | None, quiet: bool,
        sets: tuple[str, ...], only: tuple[str, ...], profile: str | None, max_cases: int | None,
        max_ranks: int | None):
    """Run a suite: every Case measured, checked and stored in a run folder."""
    from .suite import load_suite, parse_overrides

    overrides = _with_only(parse_overrides(sets), only)
    if profile:
        overrides["profile"] = profile
    limits = _limits(max_cases, max_ranks)
    if (launch_cost or estimate_from) and not dry_run:
        raise click.UsageError("--launch-cost and --estimate-from price a --dry-run")
    if dry_run:
        s = load_suite(suite, overrides=overrides, limits=limits)
        _print_plan(s)
        print_schedule(s, launch_cost, estimate_from)
        return
    if force and not resume:
        raise CommbenchError("--force only applies to --resume (it lets a resume mix settings).")
    from .launch.extras import require_run_extras

    require_run_extras()
    duration_s = _duration_s(suite, duration, repeat)
    import signal

    from .analysis.finish import finish
    from .launch.orchestrate import run_suite

    def _terminate(signum, frame):  # a batch system's SIGTERM: stop like Ctrl-C
        raise KeyboardInterrupt

    def run_one(suite_path, out_dir, again, before_finish=None):
        def finish_pass(folder, console):
            before_finish(folder)   # a burn-in stamps the pass's rows before plots and report
            finish(folder, console)

        return run_suite(suite_path, out_dir, resume=again, show_progress=not quiet, overrides=overrides,
                         force=force, limits=limits, finish=finish if before_finish is None else finish_pass)

    signal.signal(signal.SIGTERM, _terminate)
    try:
        if duration_s is not None:
            from .launch.burnin import run_burnin

            burnin_dir, passes = run_burnin(suite, out, duration_s, resume=resume, run_one=run_one)
            run_dirs = [burnin_dir]
        elif repeat > 1:
            from .launch.repeat import run_repeats

            run_dirs = run_repeats(suite, out, repeat, resume=resume, force=force, run_one=run_one)
        else:
            run_dirs = [run_one(suite, out, resume)]
    except KeyboardInterrupt:
        click.echo("commbench: interrupted; every row measured so far is in the run folder "
                   "(continue with --resume)", err=True)
        sys.exit(130)
    except OSError as exc:   # the run folder's filesystem failed mid-run (a full disk is StorageFull)
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"commbench: error: {where}{exc.strerror or exc}; the run stopped. Every Case stored so "
                   "far is kept (continue with --resume)", err=True)
        sys.exit(1)
    from .verdict import busy_warnings_all_ranks, run_exit_status_all_ranks

    from .world import launcher_rank

    code, summary = run_exit_status_all_ranks(run_dirs)
    if duration_s is not None:
        from .launch.burnin import burnin_exit_status

        code, summary = burnin_exit_status(run_dirs[0], passes, code, summary)
    for warning in busy_warnings_all_ranks(run_dirs):
        click.echo(f"commbench: warning: {warning}", err=True)
    if launcher_rank() in (None, 0):   # inside an MPI job: one summary, from rank 0
        click.echo(f"run folder: {run_dirs[0].parent if repeat > 1 else run_dirs[0]}")
        click.echo(f"commbench: {summary}")
    sys.exit(code)


@cli.command(name="nccl", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("op")
@click.option("-b", "--minbytes", "min_bytes", default="8", show_default=True, metavar="SIZE",
              help="smallest size (8, 1K, 4M, 1G: binary units, as nccl-tests)")
@click.option("-e", "--maxbytes", "max_bytes", default="128M", show_default=True, metavar="SIZE",
              help="largest size")
@click.option("-f", "--stepfactor", "step_factor", type=float, default=2.0, show_default=True,
              help="multiply the size by this between steps (1: use -i)")
@click.option("-i", "--stepbytes", "step_bytes", default=None, metavar="SIZE",
              help="add this to the size between steps (with -f 1; default 1M)")
@click.option("-n", "--iters", type=click.IntRange(1, 100000), default=20, show_default=True,
              help="timed iterations")
@click.option("-w", "--warmup_iters", "warmup", type=click.IntRange(0, 100000), default=5, show_default=True,
              help="untimed warm-up iterations")
@click.option("-g", "--ngpus", "ranks", type=click.IntRange(min=1), default=None,
              help="ranks, one per GPU (default: every GPU of this host; 2 on --backend gloo/mpi)")
@click.option("-d", "--datatype", "dtype", default="float", show_default=True,
              help="float, half, bfloat16 (bf16), int32")
@click.option("-o", "--op", "redop", type=click.Choice(["sum", "max", "min"]), default="sum", show_default=True,
              help="reduction of all_reduce, reduce_scatter and reduce")
@click.option("-c", "--check", type=click.IntRange(0, 1), default=1, show_default=True,
              help="accepted for nccl-tests' command lines: commbench checks every Case anyway (untimed)")
@click.option("-G", "--cudagraph", "graph", type=click.IntRange(min=0), default=0, show_default=True,
              help="above 0: time with CUDA graphs (timing: graph)")
@click.option("-R", "--local_register", "register", type=click.IntRange(0, 2), default=0, show_default=True,
              help="nccl backend: 1 registers buffers with ncclCommRegister, 2 as symmetric windows")
@click.option("-u", "--unalign", type=click.IntRange(0, 1024), default=0, show_default=True,
              help="shift send and receive buffers by this many elements off their alignment")
@click.option("-a", "--average", type=click.IntRange(0, 3), default=3, show_default=True,
              help="ranks' times per iteration: 0 rank 0, 1 mean, 2 fastest, 3 slowest")
@click.option("--backend", type=click.Choice(["nccl", "torch_nccl", "gloo", "mpi"]), default="nccl",
              show_default=True, help="gloo or mpi run on CPU (no GPU needed)")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="run folder (default results/<UTC time>-quick-OP)")
@click.option("--quiet", is_flag=True, help="no per-Case progress lines (the table is still printed)")
def nccl_cmd(op: str, quiet: bool, out: Path | None, **options):
    """One collective swept over sizes, typed as for nccl-tests; prints nccl-tests' table.

    OP: all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, sendrecv, gather,
    scatter. Example: commbench nccl all_reduce -b 8 -e 8G -f 2 -g 8. The run folder is a normal
    one (report, compare and accept read it; its suite.yaml is the suite the options made)."""
    from .analysis.quick import QuickArgs, run_quick, table_of
    from .analysis.finish import finish
    from .world import launcher_rank

    args = QuickArgs(op=op, **options)

    def show(folder, console):
        click.echo(table_of(folder.latest_rows(), args, folder.read_meta().get("links")))

    run_dir, code, summary = run_quick(args, out, quiet=quiet,
                                       finish=lambda folder, console: finish(folder, console, show=show))
    if launcher_rank() in (None, 0):
        click.echo(f"run folder: {run_dir}")
        click.echo(f"commbench: {summary}")
    sys.exit(code)


def _duration_s(suite: Path, duration: str | None, repeat: int) -> float | None:
    """The burn-in duration in seconds (--duration, else the suite's `duration:`), or None."""
    from .launch.burnin import suite_duration_s
    from .units import parse_duration

    if duration is not None:
        try:
            seconds = parse_duration(duration)
        except ValueError as exc:
            raise CommbenchError(f"--duration: {exc}") from None
    else:
        seconds = suite_duration_s(suite)
    if seconds is not None and repeat > 1:
        raise CommbenchError("--repeat and a burn-in duration do not go together: a burn-in already runs "
                             "the suite again and again (into one folder, pass by pass).")
    return seconds


def _with_only(overrides: dict, only: tuple[str, ...]) -> dict:
    from .suite import ONLY_KEY

    return {**overrides, ONLY_KEY: list(only)} if only else overrides


def print_schedule(s, launch_cost: str | None, estimate_from: Path | None) -> None:
    """The waves a run of suite ``s`` takes and, when priced, its projected wall time."""
    from .launch.waves import price

    try:
        lines = price(s.launches, launch_cost, estimate_from)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--launch-cost") from None
    for line in lines:
        click.echo(line)


def _print_plan(s) -> None:
    from rich.table import Table

    from .ui import make_console

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


@cli.command()
@click.argument("suite", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="as for `run`")
@click.option("--only", "only", multiple=True, metavar="BENCH", help="as for `run`")
@_limit_options
def validate(suite: Path, sets: tuple[str, ...], only: tuple[str, ...], max_cases: int | None,
             max_ranks: int | None):
    """Check a suite file; print what it expands to. Exit 2 on any problem."""
    from .suite import load_suite, parse_overrides

    s = load_suite(suite, overrides=_with_only(parse_overrides(sets), only), limits=_limits(max_cases, max_ranks))
    click.echo(f"{suite}: ok: {len(s.cases)} cases in {len(s.launches)} launch(es)")


@cli.command(name="list")
@click.argument("family", required=False)
@click.option("--op", "op", default=None, help="only the families that have this op")
def list_cmd(family: str | None, op: str | None):
    """Families, ops, backends, dtypes and every suite parameter with its help text.

    FAMILY (or --op OP) shows only that family (or the families with that op), without the
    suite keys; `commbench list` alone shows everything."""
    from .families import all_families
    from .suite import BENCH_KEYS, TOP_KEYS
    from .ui import make_console

    families = all_families()
    if family is not None and family not in families:
        raise CommbenchError(f"unknown family {family!r}: one of {', '.join(families)}")
    chosen = [f for name, f in families.items()
              if (family is None or name == family) and (op is None or op in f.ops)]
    if not chosen:
        ops = families[family].ops if family else sorted({o for f in families.values() for o in f.ops})
        raise CommbenchError(f"no family{' ' + family if family else ''} has op {op!r}: ops are {', '.join(ops)}")
    console = make_console()
    if family is None and op is None:
        _print_suite_keys(console, TOP_KEYS, BENCH_KEYS)
    for fam in chosen:
        _print_family(console, fam)


def _print_suite_keys(console, top_keys: dict, bench_keys: dict) -> None:
    from rich.table import Table

    from .ui import name_column

    t = Table(title="suite keys")
    name_column(t, "key", [*top_keys, *bench_keys])
    name_column(t, "where", ["top level", "benchmark / defaults"])
    t.add_column("meaning", ratio=1, overflow="fold")
    for k, h in top_keys.items():
        t.add_row(k, "top level", h)
    for k, h in bench_keys.items():
        t.add_row(k, "benchmark / defaults", h)
    console.print(t)


def _print_family(console, fam) -> None:
    """One family: its ops, backends, dtypes and parameters with their defaults and help."""
    from rich.table import Table

    from .ui import name_column

    ft = Table(title=f"family {fam.name}: {fam.summary}")
    name_column(ft, "what", ["dtypes", *(f"params.{n}" for n in fam.params)])
    # names listed here are typed into suites: wrap between them, never inside one
    words = [*fam.ops, *fam.backends, *fam.dtypes, *(repr(p.default) for p in fam.params.values())]
    ft.add_column("values / default", min_width=max(len(w) + 1 for w in words))
    ft.add_column("help", ratio=1, overflow="fold")   # a long word folds, never cut
    ft.add_row("ops", ", ".join(fam.ops), "")
    ft.add_row("backends", ", ".join(fam.backends), "")
    ft.add_row("dtypes", ", ".join(fam.dtypes), f"default {fam.default_dtype}")
    for name, p in fam.params.items():
        values = p.values_text()
        ft.add_row(f"params.{name}", repr(p.default), p.help + (f" ({values})" if values else ""))
    console.print(ft)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print the raw JSON")
@click.option("--srun-mpi", "srun_mpi", is_flag=True,
              help="inside a Slurm allocation: print the `srun --mpi` plugin that starts this MPI's "
                   "ranks (empty when none does; the reason goes to stderr)")
def info(as_json: bool, srun_mpi: bool):
    """GPUs, driver, CUDA, torch, NCCL, NVSHMEM, MPI versions, multicast capability."""
    import json

    if srun_mpi:
        from .launch.srun import choose_mpi_plugin

        plugin, why = choose_mpi_plugin()
        click.echo(f"commbench: srun --mpi: {plugin or 'none works'} ({why})", err=True)
        click.echo(plugin or "")
        return

    from .sysinfo import machine

    data = machine.collect()
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        from .sysinfo.view import format_info
        from .ui import make_console

        make_console().print(format_info(data))


@cli.group(name="import")
def import_group():
    """Turn other tools' outputs into run folders (then report, compare and accept work on them)."""


@import_group.command("nccl-tests")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="run folder to create; must not exist or be empty (default results/<UTC time>-nccl-tests)")
@click.option("--bench", default="nccl-tests", show_default=True,
              help="benchmark name the rows (and their case ids) carry, as a suite's `name:` would")
@click.option("--machine", type=click.Path(path_type=Path), default=None,
              help="`commbench info --json` file (or a run folder) of the host the files ran on: "
                   "rows get bound_gbps and pct_of_bound")
def import_nccl_tests_cmd(files: tuple[Path, ...], out: Path | None, bench: str, machine: Path | None):
    """nccl-tests outputs (printed tables or -J JSON, several files) -> one run folder (docs/import.md)."""
    from collections import Counter

    from .analysis.import_nccl_tests import import_files

    folder, rows = import_files(files, out, bench=bench, machine=machine)
    counts = ", ".join(f"{n} {s}" for s, n in Counter(r["status"] for r in rows).items())
    click.echo(f"imported {len(rows)} rows ({counts}) from {len(files)} file(s)")
    click.echo(f"run folder: {folder}")


def _add_report_commands() -> None:
    from .analysis.commands import accept_cmd, compare_cmd, report_cmd

    cli.add_command(report_cmd, "report")
    cli.add_command(compare_cmd, "compare")
    cli.add_command(accept_cmd, "accept")


_add_report_commands()


def _add_profile_commands() -> None:
    from .profile.commands import trace_cmd

    cli.add_command(trace_cmd, "trace")


_add_profile_commands()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
