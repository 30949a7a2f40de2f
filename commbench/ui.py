"""Console output: the live progress display and the end-of-run summary (parent process only)."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from .units import format_size


class RunDisplay:
    """Case i of n, elapsed, ETA; the description names the Case being measured."""

    def __init__(self, console: Console | None, total: int, enabled: bool, by_id: dict):
        self.console = console or Console(stderr=True)
        self.by_id = by_id
        self.enabled = enabled and total > 0
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                 console=self.console, transient=False, disable=not self.enabled)
        self.task = self.progress.add_task("starting", total=total)
        self.bad = 0

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)

    def event(self, ev: dict) -> None:
        case = self.by_id.get(ev.get("case_id"))
        if ev["event"] == "start" and case is not None:
            self.progress.update(self.task, description=(
                f"{case.bench}: {case.op} {case.backend} {case.dtype} {format_size(case.size_bytes)} [{case.variant}]"))
        elif ev["event"] == "done":
            if ev.get("status") not in ("ok", None):
                self.bad += 1
            self.progress.advance(self.task)


def print_summary(console: Console | None, df, run_dir: Path, plots: list) -> None:
    """A short table: per (op, backend, variant) the best busbw, smallest-size time, status counts."""
    console = console or Console()
    if df is None or not len(df):
        console.print(f"[yellow]no rows recorded[/yellow] in {run_dir}")
        return
    table = Table(title=f"{df['suite'].iloc[0]}: {len(df)} rows", show_lines=False)
    for col in ("op", "backend", "variant", "sizes", "best busbw GB/s", "min-size time us", "ok", "not ok"):
        table.add_column(col, justify="right" if col not in ("op", "backend", "variant") else "left")
    for (op, backend, variant), g in df.groupby(["op", "backend", "variant"], sort=False):
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
                      f"{format_size(int(r['size_bytes']))}: {str(r['reason'])[:200]}")
    if len(not_ok) > 5:
        console.print(f"... and {len(not_ok) - 5} more rows not ok (see results.csv)")
    console.print(f"results: {run_dir / 'results.csv'}")
    if plots:
        console.print(f"plots:   {run_dir / 'plots'} ({len(plots)} files)")
