"""`commbench trace` draws a Case's classified step timeline (timeline/<case_id>.r<rank>.json) as
tracks per rank: steps, comm / compute / copy per stream, and the exposed communication."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.profile import chrome_trace, step_tracks
from commbench.runfolder import step_timelines
from commbench.runfolder import timeline_files as store
from commbench.runfolder.schema import COLUMNS
from tests.unit.trace_format import validate_chrome_trace

# one two-batch MoE layer step on each rank: dispatch 0 exposed, dispatch 1 under experts 0,
# combine 0 under experts 1, combine 1 exposed; rank 1 also copies while nothing else runs
STEP = [("comm", 20, 0, 40, "ncclDevKernel_SendRecv"), ("compute", 7, 40, 140, "nvjet_gemm"),
        ("comm", 20, 45, 85, "ncclDevKernel_SendRecv"), ("comm", 20, 140, 180, "ncclDevKernel_SendRecv"),
        ("compute", 7, 140, 240, "nvjet_gemm"), ("comm", 20, 240, 280, "ncclDevKernel_SendRecv")]


def intervals(extra=()):
    return [{"kind": k, "stream": s, "start_us": a, "end_us": b, "name": n} for k, s, a, b, n in [*STEP, *extra]]


@pytest.fixture()
def run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    row = {c: "" for c in COLUMNS}
    row.update(suite="t", bench="b", case_id="layer1", family="moe", op="layer", backend="nccl_a2a",
               variant="default", dtype="bfloat16", size_bytes=1024, count=256, world_size=2, num_nodes=1,
               ranks_per_node=2, warmup=1, iters=1, timing="events", time_us=280.0, wrong=0, status="ok")
    pd.DataFrame([row]).to_csv(run / "results.csv", index=False)
    store.append_case_line(run, {"case_id": "layer1", "profiled": "", "t0_ns": None,
                                 "ranks": [{"rank": r, "host": "h", "pid": 1, "offset_ns": None,
                                            "clock_error_ns": None, "source": ""} for r in (0, 1)]})
    step_timelines.write(run, "layer1", 0, "cupti", [(0, 280)], intervals())
    step_timelines.write(run, "layer1", 1, "cupti", [(0, 300)],
                         intervals([("copy", 9, 280, 300, "Memcpy DtoD")]))
    return run


def test_the_classified_timeline_becomes_tracks_per_rank(run):
    doc = chrome_trace.case_trace(run, "layer1")
    assert validate_chrome_trace(doc) == []
    threads = {(e["pid"], e["args"]["name"]) for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    for rank in (0, 1):
        assert {(rank, "steps (cupti timeline)"), (rank, "comm stream 20"), (rank, "compute stream 7"),
                (rank, "exposed comm")} <= threads
    assert (1, "copy stream 9") in threads and (0, "copy stream 9") not in threads
    exposed = sorted((e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"]
                     if e.get("cat") == "exposed" and e["pid"] == 0)
    assert exposed == [(0.0, 40.0), (240.0, 280.0)]   # what waited: dispatch 0 and combine 1
    steps = [e for e in doc["traceEvents"] if e.get("cat") == "step"]
    assert sorted((e["pid"], e["dur"]) for e in steps) == [(0, 280.0), (1, 300.0)]


def test_exposed_spans_leave_out_comm_under_compute_or_copy():
    ivs = [{"kind": "comm", "start_us": 0, "end_us": 100}, {"kind": "compute", "start_us": 10, "end_us": 20},
           {"kind": "copy", "start_us": 50, "end_us": 120}, {"kind": "comm", "start_us": 90, "end_us": 130}]
    assert step_tracks.exposed_spans(ivs) == [(0, 10), (20, 50), (120, 130)]


def test_the_exposed_track_is_the_rows_exposed_comm():
    """The trace's exposed track counts as the rows' exposed_comm_us does (one union/subtract)."""
    import random

    from commbench.measure import step_split

    rng = random.Random(7)
    for _ in range(50):
        ivs = [{"kind": rng.choice(step_split.KINDS), "start_us": (s := rng.uniform(0, 100)),
                "end_us": s + rng.uniform(0, 30)} for _ in range(rng.randint(0, 12))]
        track_us = sum(e - s for s, e in step_tracks.exposed_spans(ivs))
        assert track_us == pytest.approx(step_split.split_window(ivs, 0, 200)["exposed_comm_us"])
    assert not hasattr(step_tracks, "_union")   # no merge of its own


def test_trace_command_writes_the_tracks_and_a_damaged_timeline_is_refused(run):
    out = run / "t.json"
    res = CliRunner().invoke(cli, ["trace", str(run), "--case", "layer1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert any(e.get("cat") == "exposed" for e in json.loads(out.read_text())["traceEvents"])
    (run / step_timelines.rel("layer1", 1)).write_text('{"steps": [[0, 1]], "intervals": [{"kind": "wait"}]}')
    res = CliRunner().invoke(cli, ["trace", str(run), "--case", "layer1", "--out", str(out)])
    assert res.exit_code != 0 and "interval 0 needs kind" in res.output


def test_the_moe_region_survives_the_file_and_reaches_the_slice(tmp_path):
    """A MoE layer interval keeps the part and micro-batch that launched it (``region``) on disk and
    in the trace slice's arguments; an interval without one gets no such key."""
    run = tmp_path / "r"
    run.mkdir()
    ivs = intervals()
    ivs[0]["region"] = "dispatch.0"
    step_timelines.write(run, "c", 0, "cupti", [(0, 280)], ivs)
    doc = step_timelines.read(run, "c", 0)
    assert doc["intervals"][0]["region"] == "dispatch.0" and "region" not in doc["intervals"][1]
    slices = [e for e in step_tracks.rank_tracks(doc, 0) if e.get("ph") == "X" and e["cat"] == "comm"]
    assert any(e["args"].get("region") == "dispatch.0" for e in slices)
