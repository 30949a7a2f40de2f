"""The report at fleet size: a panel of many curves draws its outliers and a band (curve_band.py),
names every outlier in a table, and lists a large run's points as their spread per size."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from commbench.analysis.report import curve_band, plots
from commbench.analysis.report.build import build_report
from commbench.analysis.report.document import Section
from commbench.runfolder.reader import load_run

ROOT = Path(__file__).resolve().parents[2]
SIZES = [1 << e for e in range(3, 21)]


def _fleet_module():
    spec = importlib.util.spec_from_file_location("fleet_scale", ROOT / "benchmarks" / "fleet_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _table(n_curves: int, slow: dict[int, float], spread: float = 0.05, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    base = np.array([5.0 + s / 1e3 for s in SIZES])
    rows = {f"node{i:03d}": base * slow.get(i, 1.0) * rng.lognormal(0, spread, len(SIZES)) for i in range(n_curves)}
    return pd.DataFrame.from_dict(rows, orient="index", columns=SIZES)


def test_the_slow_curves_and_only_they_are_outliers():
    scores = curve_band.curve_scores(_table(60, {7: 1.5, 41: 0.6}))
    out = curve_band.outliers(scores)
    assert set(out.index) == {"node007", "node041"}
    assert 1.4 < out.loc["node007", "median_ratio"] < 1.6 and out.loc["node007", "robust_z"] > 3.5
    assert out.loc["node041", "robust_z"] < -3.5             # faster is named too: it is not like the others
    assert set(scores.index[:2]) == {"node007", "node041"}   # sorted by |z|: the outliers first


def test_a_tight_fleet_names_no_one_for_a_percent_and_identical_curves_name_no_one():
    tight = _table(60, {3: 1.02}, spread=0.001)
    assert curve_band.outliers(curve_band.curve_scores(tight)).empty     # z is large, the effect is not
    same = pd.DataFrame([[10.0] * len(SIZES)] * 30, index=[f"n{i}" for i in range(30)], columns=SIZES)
    scores = curve_band.curve_scores(same)
    assert scores["robust_z"].isna().all() and curve_band.outliers(scores).empty
    same.iloc[4] *= 2.0                        # more than half alike (MAD 0): the mean deviation scales
    assert list(curve_band.outliers(curve_band.curve_scores(same)).index) == ["n4"]


def test_band_is_per_size_min_p5_median_p95_max():
    table = _table(40, {})
    b = curve_band.band(table)
    assert list(b.index) == SIZES and (b["n"] == 40).all()
    assert ((b["min"] <= b["p5"]) & (b["p5"] <= b["median"]) & (b["median"] <= b["p95"])
            & (b["p95"] <= b["max"])).all()
    assert np.allclose(b["median"], table.median(axis=0))


def _rows(n_hosts: int, slow: dict[int, float]) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    recs = []
    for h in range(n_hosts):
        for op in ("all_reduce", "broadcast"):
            for size in SIZES:
                t = (5.0 + size / 1e3) * slow.get(h, 1.0) * rng.lognormal(0, 0.03)
                recs.append(dict(op=op, backend="nccl", variant="default", dtype="float32", size_bytes=size,
                                 time_us=t, busbw_gbps=size / t / 1e3, status="ok", hosts=f"node{h:04d}"))
    return pd.DataFrame(recs)


def test_a_figure_of_hundreds_of_nodes_has_a_short_legend_naming_the_slow_node():
    df = _rows(300, {123: 1.4})
    fig = plots.metric_figure(df, "time_us")
    texts = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    texts += [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert len(texts) <= curve_band.MAX_LABELLED + len(curve_band.BAND_STYLE)
    assert any("node0123" in t for t in texts)
    assert sum(len(ax.get_lines()) for ax in fig.axes) <= 2 * (curve_band.MAX_LABELLED + 1)
    assert all("300 curves" in ax.get_title() for ax in fig.axes if ax.get_visible())
    plots.figure_png(fig)
    table = plots.curve_outliers([p for p in plots.figure_panels(df, "time_us") if p.banded])
    assert set(table["curve"].str.split().str[-1]) == {"node0123"} and set(table["op"]) == {"all_reduce", "broadcast"}


def test_a_few_curves_are_still_drawn_one_by_one():
    df = _rows(curve_band.MAX_CURVES, {2: 1.4})
    fig = plots.metric_figure(df, "time_us")
    assert all(len(ax.get_lines()) == curve_band.MAX_CURVES for ax in fig.axes if ax.get_visible())
    assert not any(p.banded for p in plots.figure_panels(df, "time_us"))
    plots.figure_png(fig)


def test_report_of_a_synthetic_fleet_folder(tmp_path):
    fleet = _fleet_module()
    fleet.build_folder(tmp_path / "run", 3000, seed=3, regressed=False)   # 30 hosts, node0015 slow
    run = load_run(tmp_path / "run")
    assert len(run.results) == 3000 and len(run.samples) == 3000 * fleet.RANKS * fleet.ITERS
    doc = build_report([run])
    curves = next(s for s in doc.sections if s.title == "Curves")
    subs = [it for it in curves.items if isinstance(it, Section)]
    assert [s.title for s in subs] == ["Outlier curves: busbw_gbps", "Outlier curves: time_us"]
    for sub in subs:
        table = next(it for it in sub.items if isinstance(it, pd.DataFrame))
        assert set(table["curve"].str.split().str[-1]) == {"node0015"}
        assert (table["median_ratio"].sub(1.0).abs() > 0.2).all()
    tables = next(s for s in doc.sections if s.title == "Tables")
    spread = [it for sub in tables.items if isinstance(sub, Section)
              for it in sub.items if isinstance(it, pd.DataFrame)]
    assert len(spread) == 4 and all(len(t) == len(fleet.SIZES_BYTES) and (t["points"] == 30).all() for t in spread)


def test_warning_tables_of_a_fleet_list_the_first_rows_and_say_how_many_more():
    from commbench.analysis.report import tables
    from commbench.analysis.report.sections import problems

    df = _rows(300, {})
    df["time_us_p90"] = df["time_us"] * np.where(np.arange(len(df)) % 2 == 0, 1.5, 2.0)
    df["status"] = "ok"
    unstable = tables.unstable(df)
    assert "hosts" in unstable.columns and len(unstable) == len(df) > problems.MAX_LISTED   # the node is named
    sec = Section("Warnings")
    problems._listed(sec, unstable.sort_values("p90_over_median", ascending=False), "the most unstable first")
    text, table = sec.items
    assert f"{len(df):,} points; the first {problems.MAX_LISTED}" in text
    assert len(table) == problems.MAX_LISTED and (table["p90_over_median"] == 2.0).all()


def test_many_curves_of_two_backends_are_faceted_so_a_backend_is_not_an_outlier():
    df = _rows(100, {42: 1.4})
    other = df.copy()
    other["backend"], other["time_us"] = "gloo", other["time_us"] * 3.0
    df = pd.concat([df, other], ignore_index=True)
    panels = plots.figure_panels(df, "time_us")
    assert [p.op for p in panels] == ["all_reduce gloo", "all_reduce nccl", "broadcast gloo", "broadcast nccl"]
    assert all(p.banded and len(p.table) == 100 for p in panels)
    table = plots.curve_outliers(panels)
    assert sorted(set(table["curve"])) == ["gloo default node0042", "nccl default node0042"]
    plots.figure_png(plots.metric_figure(df, "time_us"))
