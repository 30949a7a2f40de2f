"""`commbench trace RUN [--case ID]`: Chrome-trace JSON of a Case's ranks (docs/profiling.md)."""
from __future__ import annotations

from pathlib import Path

import click


@click.command("trace")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--case", "case_ids", multiple=True, metavar="ID",
              help="Case id(s) to export (default: every Case with per-rank data)")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="output file when one Case is exported (default RUN/traces/chrome/<case_id>.json)")
def trace_cmd(run_dir: Path, case_ids: tuple[str, ...], out: Path | None):
    """Merge all ranks of a Case into one Chrome trace (open it in Perfetto or chrome://tracing)."""
    from ..runfolder.reader import load_run
    from .chrome_trace import write_case_traces

    load_run(run_dir)   # a clear error when RUN is not a run folder
    told: set[str] = set()

    def warn(message: str) -> None:   # each Case reads the files again: say it once
        if message not in told:
            told.add(message)
            click.echo(f"warning: {message}", err=True)

    for path in write_case_traces(run_dir, list(case_ids) or None, out, warn):
        click.echo(str(path))
