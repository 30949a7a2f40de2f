"""What the report shows reads as text for people: run metadata without Python reprs, unstable
points with every parameter that tells them apart, no busbw curves of training steps, trace links
named by what the Case measured."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from commbench.analysis.report import tables
from commbench.analysis.report.build import build_report
from commbench.analysis.report.sections.timelines import case_name
from commbench.runfolder.reader import load_run

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "tests" / "fixtures" / "runs"
INFO = ROOT / "docs" / "measurements" / "2026-11-29-h200x2" / "info.json"


def test_metadata_values_are_text_not_python_reprs():
    meta = json.loads(INFO.read_text())
    meta["command"] = ["commbench", "run", "suites/x 2.yaml"]
    meta["launches"] = [{"launch_id": 0, "ranks": 2, "status": "ok", "wall_s": 3.5, "reason": ""}]
    values = dict(tables.metadata(meta).itertuples(index=False))
    for text in values.values():
        assert not any(mark in text for mark in ("{'", "['", "': ", "None", "\\x1b", "\t")), text
    assert values["gpus"] == "2x name=NVIDIA H200, memory_total_mib=143771, compute_capability=9.0"
    assert values["nvshmem"] == "library=3.4.5, source=package"
    assert values["command"] == "commbench run 'suites/x 2.yaml'"
    assert values["topology"].startswith("GPU0 GPU1 CPU Affinity") and "Legend" not in values["topology"]
    assert "launch 0" in values


def test_unstable_points_name_in_place_and_timing_when_they_vary():
    rows = []
    for in_place in (False, True):
        rows.append(dict(op="all_reduce", backend="nccl", variant="default", dtype="float32", world_size=2,
                         in_place=in_place, timing="events", size_bytes=1024, time_us=10.0, time_us_p90=20.0,
                         status="ok", knob=3))
    df = pd.DataFrame(rows)
    shown = tables.unstable(df, params=["knob"])
    assert "in_place" in shown.columns and list(shown["in_place"]) == [False, True]
    assert "timing" not in shown.columns and "knob" not in shown.columns   # the same on every row
    assert not shown.drop(columns=["p90_over_median"]).duplicated().any()


def _training_run(tmp_path: Path) -> Path:
    src = ROOT / "docs" / "measurements" / "2026-12-02-h200x1-session" / "shared-training-results.csv"
    run = tmp_path / "training"
    run.mkdir()
    (run / "results.csv").write_text(src.read_text())
    return run


def test_training_rows_get_their_own_view_not_busbw_curves(tmp_path):
    training = load_run(_training_run(tmp_path))
    titles = [s.title for s in build_report([training]).sections]
    assert "Curves" not in titles and "Training step: compute and communication" in titles
    summary = build_report([training]).sections[0]
    assert "no ok points besides training steps" in summary.items   # no "best busbw" of a step
    both = build_report([training, load_run(RUNS / "cpu-base")])
    curves = next(s for s in both.sections if s.title == "Curves")
    assert "Training steps are not drawn here" in curves.items[0]


def test_trace_link_names_op_size_and_backend():
    row = dict(op="all_reduce", size_bytes=1 << 20, backend="torch_nccl", dtype="bfloat16",
               variant="default", in_place=True)
    assert case_name(row) == "all_reduce 1MiB torch_nccl bfloat16 in place"
    assert case_name(None) == "a Case not in results.csv"


def test_the_tables_show_the_p99_tail_where_the_rows_have_it():
    row = dict(op="all_reduce", backend="nccl", variant="default", dtype="float32", world_size=2, in_place=False,
               timing="events", size_bytes=1024, time_us=10.0, time_us_p90=20.0, algbw_gbps=1.0, busbw_gbps=1.0,
               wrong=0, status="ok")
    old = pd.DataFrame([row])   # a folder from before p99: the p90 tail
    assert "time_us_p90" in tables.points(old).columns and "time_us_p99" not in tables.points(old).columns
    new = pd.DataFrame([{**row, "time_us_p99": 30.0}])
    shown = tables.points(new)
    assert "time_us_p99" in shown.columns and "time_us_p90" not in shown.columns
    assert shown["time_us_p99"].iloc[0] == 30.0 and tables.unstable(new)["time_us_p99"].iloc[0] == 30.0
    mixed = pd.DataFrame([row, {**row, "size_bytes": 2048, "time_us_p99": 30.0}])   # p90 stays where p99 is not
    assert {"time_us_p99", "time_us_p90"} <= set(tables.points(mixed).columns)
