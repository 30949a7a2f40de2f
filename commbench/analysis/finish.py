"""The end of a run: plots, the summary table and the report, built only from stored rows.

`run` and `accept` pass ``finish`` to ``launch.orchestrate.run_suite``, which calls it once every
row is stored (the folder still locked; rank 0 only inside an MPI job)."""
from __future__ import annotations

from ..runfolder import RunFolder


def finish(folder: RunFolder, console, show=None) -> None:
    """Plots and the end-of-run summary (only from stored rows). ``show(folder, console)``, when
    given, prints instead of the summary table (`commbench nccl` prints nccl-tests' table)."""
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
    if show is not None:
        show(folder, console)
    else:
        print_summary(console, df, folder.path, plots, unstable=_unstable(df))
    if df is not None and len(df):
        from .report.build import write_report

        html_path, md_path = write_report([folder.path])
        (console or _stderr_console()).print(f"report:  {html_path} (and {md_path.name})")


def _unstable(df) -> tuple[int, str] | None:
    """(how many ok points are unstable, the rule) by the report's rule (tables.unstable)."""
    if df is None or not len(df):
        return None
    try:
        from .report.tables import UNSTABLE_P90_OVER_MEDIAN, unstable
    except ImportError:   # the report's extras are not installed
        return None
    return len(unstable(df)), f"p90 time above {UNSTABLE_P90_OVER_MEDIAN}x the median"


def _stderr_console():
    from ..ui import make_console

    return make_console()
