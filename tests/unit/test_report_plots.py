"""Run plots: files written, only ok rows, line labels, size tick labels."""
from __future__ import annotations

import pandas as pd

from commbench.analysis.report import plots


def _rows(statuses=("ok",)):
    rows = []
    for op in ("all_reduce", "sendrecv"):
        for backend in ("mpi", "gloo"):
            for exp in range(3, 21, 3):
                size = 2**exp
                time_us = 4.0 + size / 1000.0
                for status in statuses:
                    rows.append(dict(op=op, backend=backend, variant="default", dtype="float32",
                                     size_bytes=size, time_us=time_us,
                                     busbw_gbps=size / time_us / 1e3, status=status))
    return pd.DataFrame(rows)


def test_write_run_plots_writes_pngs(tmp_path):
    paths = plots.write_run_plots(_rows(), tmp_path / "plots")
    assert sorted(p.name for p in paths) == ["busbw_vs_size.png", "time_vs_size.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert p.stat().st_size > 5000


def test_no_ok_rows_writes_nothing(tmp_path):
    assert plots.write_run_plots(_rows(statuses=("failed",)), tmp_path) == []
    assert not any(tmp_path.iterdir())


def test_only_ok_rows_and_varying_columns_in_labels():
    df = _rows(statuses=("ok", "wrong"))
    assert set(plots.ok_rows(df)["status"]) == {"ok"}
    df["dtype"] = ["float32", "bfloat16"] * (len(df) // 2)
    assert plots.line_columns(df) == ["backend", "variant", "dtype"]


def test_size_ticks_use_units():
    fig = plots.metric_figure(_rows(), "time_us")
    ax = fig.axes[0]
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert "8B" in labels and any(lbl.endswith("KiB") for lbl in labels)
    lines = {line.get_label() for line in ax.get_lines()}
    assert lines == {"gloo default", "mpi default"}


def test_title_names_suite_ranks_hosts_and_date():
    df = _rows().assign(suite="quickstart", world_size=2)
    meta = {"hosts": ["node-a", "node-b"], "started_utc": "2026-12-01T09:10:42+00:00"}
    title = plots.plot_title(df, [meta])
    assert title == "quickstart | 2 ranks | node-a, node-b | 2026-12-01 09:10 UTC"
    fig = plots.metric_figure(df, "time_us", title)
    assert fig._suptitle.get_text() == title
    plots.plt.close(fig)


def test_many_lines_share_one_legend_outside_the_panels():
    few = plots.metric_figure(_rows(), "time_us")
    assert not few.legends and all(ax.get_legend() is not None for ax in few.axes if ax.get_visible())
    plots.plt.close(few)
    many = pd.concat([_rows().assign(run=f"run-{k}") for k in range(3)], ignore_index=True)   # 6 lines
    fig = plots.metric_figure(many, "time_us")
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    legend = fig.legends[0]
    assert len(legend.get_texts()) == 6
    fig.canvas.draw()
    box = legend.get_window_extent()
    for ax in fig.axes:   # the legend covers no panel
        assert not box.overlaps(ax.get_window_extent())
    # the same line has the same colour in every panel
    colours = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            assert colours.setdefault(line.get_label(), line.get_color()) == line.get_color()
    png = plots.figure_png(fig)
    assert png[:4] == b"\x89PNG"


def _report_figures(monkeypatch, run_names):
    """Every figure a report of these fixture runs renders, caught where it is saved."""
    from pathlib import Path

    from matplotlib.figure import Figure

    from commbench.analysis.report.build import build_report
    from commbench.runfolder.reader import load_run

    runs = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
    seen = []
    save = Figure.savefig

    def savefig(fig, *args, **kwargs):
        fig.canvas.draw()   # tick labels exist only once drawn
        seen.append(fig)
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    build_report([load_run(runs / name) for name in run_names])
    return seen


def _unreadable(fig) -> list[str]:
    """What a reader could not read: `$` in a tick label, a panel with no data or no tick labels."""
    problems = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        name = ax.get_title() or "panel"
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t.get_text() for t in axis.get_ticklabels() + axis.get_ticklabels(minor=True)]
            problems += [f"{name}: tick label {lbl!r}" for lbl in labels if "$" in lbl]
            if not any(lbl.strip() for lbl in labels):
                problems.append(f"{name}: no {axis.axis_name} tick labels")
        if not (ax.get_lines() or ax.patches or ax.collections or ax.images):
            problems.append(f"{name}: empty axis")
    return problems


def test_report_plots_have_readable_ticks_and_no_empty_axis(monkeypatch):
    figs = _report_figures(monkeypatch, ["cpu-base", "gpu8-healthy"])
    assert len(figs) >= 2
    problems = [p for fig in figs for p in _unreadable(fig)]
    assert not problems, problems


def test_dollars_in_user_text_stay_literal_and_the_check_catches_math_ticks():
    """`$` in a run name is drawn as typed; a log axis's default (math text) labels would be caught."""
    df = _rows().assign(run=lambda d: d["backend"].map({"mpi": "a$_$b", "gloo": "c$d"}))
    fig = plots.metric_figure(df, "time_us", "suite $x$")
    fig.canvas.draw()
    assert not _unreadable(fig)
    assert {t.get_text() for t in fig.axes[0].get_legend().get_texts()} >= {"mpi default a$_$b"}
    plots.figure_png(fig)   # draws without a math parse error
    bad = plots.plt.figure()
    ax = bad.add_subplot()
    ax.plot([1, 100], [1, 1000])
    ax.set_yscale("log")   # matplotlib's default log formatter writes $\mathdefault{10^{1}}$
    bad.canvas.draw()
    assert any("tick label" in p for p in _unreadable(bad))
    plots.plt.close(bad)
