"""The `commbench` command: thin click commands over the modules that do the work.

Each command imports what it needs when it runs (rich, pandas, torch, matplotlib), so
`commbench --help` and `validate` start in well under 0.2 s."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from .commands.options import load, overrides_of, suite_options
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
        except KeyboardInterrupt:   # before a run's own handler (start-up) or in a command without one:
            click.echo("commbench: interrupted", err=True)   # 130 as the README's table says, not
            sys.exit(130)                                     # click's "Aborted!" and 1
        except (click.exceptions.Exit, click.ClickException, click.Abort):
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


@cli.command()
@click.argument("suite", type=click.Path(path_type=Path))
@suite_options
def validate(suite: Path, sets: tuple[str, ...], only: tuple[str, ...], max_cases: int | None,
             max_ranks: int | None):
    """Check a suite file; print what it expands to. Exit 2 on any problem."""
    s = load(suite, overrides_of(sets, only), max_cases, max_ranks)
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


def _add_commands() -> None:
    from .analysis.commands import report_cmd
    from .commands.accept_cmd import accept_cmd
    from .commands.compare_cmd import compare_cmd
    from .commands.nccl_cmd import nccl_cmd
    from .commands.run_cmd import run_cmd

    for command in (run_cmd, nccl_cmd, report_cmd, compare_cmd, accept_cmd):
        cli.add_command(command)


_add_commands()


def _add_profile_commands() -> None:
    from .profile.commands import trace_cmd

    cli.add_command(trace_cmd, "trace")


_add_profile_commands()


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
