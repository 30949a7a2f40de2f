"""The end of a run: plots, the summary table and the report, built only from stored rows.

`run` and `accept` pass ``finish`` to ``launch.orchestrate.run_suite``, which calls it once every
row is stored (the folder still locked; rank 0 only inside an MPI job)."""
from __future__ import annotations

from ..runfolder import RunFolder


def finish(folder: RunFolder, console) -> None:
    """Plots and the end-of-run summary (only from stored rows)."""
    from ..runfolder.reader import is_run_folder, load
    from ..ui import print_summary

    df = load(folder.path) if is_run_folder(folder.path) else None   # None: no row stored
    plots = []
    if df is not None and len(df):
        try:
            from .report.plots import write_run_plots

            plots = write_run_plots(df, folder.path / "plots", folder.read_meta())
        except ImportError:
            plots = []
    print_summary(console, df, folder.path, plots)
    if df is not None and len(df):
        from .report.build import write_report

        html_path, md_path = write_report([folder.path])
        (console or _stderr_console()).print(f"report:  {html_path} (and {md_path.name})")


def _stderr_console():
    from ..ui import make_console

    return make_console()
