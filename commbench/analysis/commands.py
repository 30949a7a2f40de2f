"""Click command `report`: it reads stored run folders only (wired into the CLI group by
commbench/cli.py; `compare`, whose --confirm may measure, and `accept`, which may start a run, are
in commbench/commands/).

pandas, matplotlib and scipy are imported inside the commands: `commbench --help`, `validate`
and `run`'s start do not pay for them."""
from __future__ import annotations

from pathlib import Path

import click

from .outputs import twin_paths, write_both


@click.command("report")
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="HTML file to write (a Markdown twin goes next to it). "
                   "Default: RUN/report.html for one run folder or one `run --repeat` set, "
                   "./report.html for several.")
def report_cmd(runs: tuple[Path, ...], out: Path | None) -> None:
    """Build a self-contained HTML report and a Markdown twin from one or more run folders."""
    from ..runfolder.reader import load_run
    from .report.build import build_report
    from .runsets import expand, one_folder

    folders = expand(runs)   # a folder of repeats counts as its runs
    loaded = [load_run(r) for r in folders]
    if out is None:   # a run folder or a repeat set holds its own report; never the current folder
        home = one_folder(runs) or (folders[0] if len(folders) == 1 else None)
        out = home / "report.html" if home is not None else Path("report.html")
    html_path, md_path = write_both(build_report(loaded, twin_paths(out)[0].parent), out)
    click.echo(f"wrote {html_path} and {md_path}")
