"""Console output: the progress of a run and the end-of-run summary.

On a terminal: a live progress line (what runs now, Case i of n, elapsed, ETA) laid out so that
the counts and the ETA survive an 80-column window. Anywhere else (a batch log, a pipe, every
rank job under mpiexec or srun): one plain line per finished Case and no ANSI codes at all.
Names a user types into a suite (ops, backends, parameter names) are never cut: their columns
keep their full width and the free text beside them wraps.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column, Table

from .units import format_size


def make_console(stderr: bool = False) -> Console:
    """A console that writes colour and live displays only to a terminal (and never with NO_COLOR).

    A rank of an MPI job is never at a terminal: Open MPI hands its ranks a pseudo-terminal that
    ends in the job's log, which must stay plain text."""
    from .world import inside_mpi_job

    stream = sys.stderr if stderr else sys.stdout
    tty = bool(getattr(stream, "isatty", lambda: False)()) and not inside_mpi_job()
    return Console(stderr=stderr, force_terminal=None if tty else False,
                   no_color=not tty or "NO_COLOR" in os.environ, highlight=tty)


def name_column(table: Table, header: str, names, **kw) -> None:
    """A column of names a user types: never folded or cut (the other columns wrap instead)."""
    width = max([len(header), *(len(str(n)) for n in names)])
    table.add_column(header, no_wrap=True, min_width=width, **kw)


def describe_case(case) -> str:
    return f"{case.bench}: {case.op} {case.backend} {case.dtype} {format_size(case.size_bytes)} [{case.variant}]"


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class CaseLines:
    """One plain line per finished Case: `[12/152] ok      bench: op backend dtype size [variant]
    (0:01:10 elapsed, ETA 0:07:30)`. For batch logs and rank 0 of an MPI job."""

    def __init__(self, total: int, write=None):
        self.total, self.done, self.t0 = total, 0, time.time()
        self.write = write or (lambda line: print(line, flush=True))

    def case_done(self, description: str, status: str) -> None:
        self.done += 1
        elapsed = time.time() - self.t0
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        self.write(f"[{self.done}/{self.total}] {status:<7} {description} "
                   f"({_clock(elapsed)} elapsed, ETA {_clock(eta)})")


class RunDisplay:
    """Case i of n, elapsed, ETA; the description names the Case being measured."""

    def __init__(self, console: Console | None, total: int, enabled: bool, by_id: dict):
        self.console = console or make_console(stderr=True)
        self.by_id = by_id
        self.enabled = enabled and total > 0
        self.live = self.enabled and self.console.is_terminal
        self.lines = CaseLines(total, lambda line: self.console.print(line, markup=False, highlight=False,
                                                                      soft_wrap=True))
        # The description takes what is left and is cut with an ellipsis; the bar shrinks to fit;
        # the counts, elapsed time and ETA keep their width (an 80-column window shows them all).
        self.progress = Progress(
            TextColumn("{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
            BarColumn(bar_width=None, table_column=Column(ratio=0, max_width=24)),
            MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=self.console, transient=False, disable=not self.live, expand=True)
        self.task = self.progress.add_task("starting", total=total)
        self.current: dict[str, str] = {}
        self.bad = 0

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def event(self, ev: dict) -> None:
        case = self.by_id.get(ev.get("case_id"))
        if ev["event"] == "start" and case is not None:
            self.progress.update(self.task, description=describe_case(case))
        elif ev["event"] == "done":
            if ev.get("status") not in ("ok", None):
                self.bad += 1
            self.progress.advance(self.task)
            if self.enabled and not self.live:
                self.lines.case_done(describe_case(case) if case is not None else str(ev.get("case_id")),
                                     str(ev.get("status", "")))


def print_summary(console: Console | None, df, run_dir: Path, plots: list) -> None:
    """A short table: per (op, backend, variant) the best busbw, smallest-size time, status counts."""
    console = console or make_console()
    if df is None or not len(df):
        console.print(f"[yellow]no rows recorded[/yellow] in {run_dir}")
        return
    table = Table(title=f"{df['suite'].iloc[0]}: {len(df)} rows", show_lines=False)
    groups = list(df.groupby(["op", "backend", "variant"], sort=False))
    name_column(table, "op", [k[0] for k, _ in groups])
    name_column(table, "backend", [k[1] for k, _ in groups])
    table.add_column("variant", overflow="fold")
    for col in ("sizes", "best busbw GB/s", "min-size time us", "ok", "not ok"):
        table.add_column(col, justify="right", overflow="fold")
    for (op, backend, variant), g in groups:
        ok = g[g["status"] == "ok"]
        best = f"{ok['busbw_gbps'].max():.2f}" if len(ok) else "-"
        small = ok.sort_values("size_bytes").iloc[0] if len(ok) else None
        t_small = f"{small['time_us']:.1f} @ {format_size(int(small['size_bytes']))}" if small is not None else "-"
        sizes = f"{format_size(int(g['size_bytes'].min()))}-{format_size(int(g['size_bytes'].max()))}"
        bad = g[g["status"] != "ok"]
        bad_txt = ", ".join(f"{n} {s}" for s, n in bad["status"].value_counts().items()) or "0"
        table.add_row(str(op), str(backend), str(variant), sizes, best, t_small, str(len(ok)), bad_txt)
    console.print(table)
    not_ok = df[df["status"] != "ok"]
    for _, r in not_ok.head(5).iterrows():
        console.print(f"[yellow]{r['status']}[/yellow] {r['op']} {r['backend']} "
                      f"{format_size(int(r['size_bytes']))}: {escape(str(r['reason'])[:200])}", markup=True,
                      highlight=False)
    if len(not_ok) > 5:
        console.print(f"... and {len(not_ok) - 5} more rows not ok (see results.csv)")
    console.print(f"results: {run_dir / 'results.csv'}", soft_wrap=True)
    if plots:
        console.print(f"plots:   {run_dir / 'plots'} ({len(plots)} files)", soft_wrap=True)
