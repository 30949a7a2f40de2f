"""The report's per-rank steps: each rank's timed steps split from its stored timeline, the Cases
chosen from the rows (several ranks first, then the largest exposed share)."""
from __future__ import annotations

import pandas as pd
import pytest

from commbench.analysis.report import rank_steps, step_bars
from commbench.analysis.report.build import build_report
from commbench.runfolder import step_timelines
from commbench.runfolder.reader import load_run
from commbench.runfolder.writer import RunFolder


def row(cid, op, world_size, step, exposed, **kw):
    return {"suite": "training", "bench": "b", "case_id": cid, "family": "training", "op": op, "backend": "nccl",
            "variant": "default", "dtype": "bfloat16", "size_bytes": 1024, "count": 1, "world_size": world_size,
            "num_nodes": 1, "ranks_per_node": world_size, "warmup": 1, "iters": 2, "timing": "step_events",
            "time_us": step, "wrong": 0, "status": "ok", "reason": "", "log": "", "strategy": op,
            "step_us": step, "compute_us": step - exposed - 5.0, "comm_us": exposed + 10.0, "copy_us": 0.0,
            "exposed_comm_us": exposed, "overlap_pct": 50.0, "idle_us": 5.0, "slowest_rank": 1, **kw}


def step_of(t0, comm_end, compute_end, copy=()):
    """One step at t0: comm [t0, t0+comm_end) beside compute [t0, t0+compute_end) (plus copies)."""
    ivs = [{"kind": "comm", "stream": 20, "start_us": t0, "end_us": t0 + comm_end, "name": "ncclDevKernel"},
           {"kind": "compute", "stream": 7, "start_us": t0, "end_us": t0 + compute_end, "name": "gemm"}]
    return ivs + [{"kind": "copy", "stream": 9, "start_us": t0 + a, "end_us": t0 + b, "name": "Memcpy"}
                  for a, b in copy]


@pytest.fixture()
def run(tmp_path):
    folder = RunFolder(tmp_path / "run")
    folder.create(resume=False)
    for r in (row("one", "tp", 1, 100.0, 80.0), row("two", "fsdp", 2, 100.0, 10.0),
              row("nosplit", "cp", 2, 90.0, 0.0)):
        folder.append_row(r)
    run = tmp_path / "run"
    # rank 0: steps of 100 us, comm 60 beside compute 50 (exposed 10); rank 1 slower, with a copy
    step_timelines.write(run, "two", 0, "cupti", [(0, 100), (100, 200)], step_of(0, 60, 50) + step_of(100, 60, 50))
    step_timelines.write(run, "two", 1, "cupti", [(0, 120), (120, 240)],
                         step_of(0, 60, 50, [(70, 90)]) + step_of(120, 60, 50, [(70, 90)]))
    step_timelines.write(run, "one", 0, "cupti", [(0, 100)], step_of(0, 90, 10))
    return run


def test_cases_with_several_ranks_come_first_then_the_largest_exposed_share(run):
    df = load_run(run).results
    assert rank_steps.candidates(df) == ["two", "nosplit", "one"]
    assert [cid for cid, _ in rank_steps.shown(load_run(run))] == ["two", "one"]   # files only where stored


def test_each_ranks_steps_split_as_the_rows_are(run):
    splits = rank_steps.rank_splits(run, "two")
    assert sorted(splits) == [0, 1] and len(splits[1]) == 2
    s = splits[1][0]
    assert (s["step_us"], s["compute_us"], s["copy_us"], s["exposed_comm_us"], s["idle_us"]) == \
        pytest.approx((120.0, 70.0, 20.0, 10.0, 40.0))
    assert step_bars.parts(s) == pytest.approx([50.0, 20.0, 10.0, 40.0])   # stacks to the step
    fig = rank_steps.rank_figure(splits, "fsdp", slowest=1)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["rank 0", "rank 1 (slowest)"]


def test_the_report_has_the_section_and_leaves_out_a_damaged_file(run):
    doc = build_report([load_run(run)])
    titles = [s.title for s in doc.sections]
    assert titles.index("Training step: compute and communication") < titles.index("Steps per rank")
    sec = doc.sections[titles.index("Steps per rank")]
    assert [i.alt for i in sec.items if hasattr(i, "alt")] == ["steps per rank of case two",
                                                               "steps per rank of case one"]
    (run / step_timelines.rel("two", 1)).write_text("{not json")
    assert [cid for cid, _ in rank_steps.shown(load_run(run))] == ["one"]


def test_no_stored_timelines_no_section(tmp_path):
    folder = RunFolder(tmp_path / "run")
    folder.create(resume=False)
    folder.append_row(row("one", "tp", 1, 100.0, 80.0))
    doc = build_report([load_run(tmp_path / "run")])
    assert "Steps per rank" not in [s.title for s in doc.sections]
    assert pd.notna(load_run(tmp_path / "run").results["idle_us"]).all()


def test_both_timeline_sections_look_rows_up_one_way(run):
    """The per-rank steps and the rank timelines name a Case from its row through one look-up."""
    from commbench.analysis.report.sections import step_timelines as steps_section
    from commbench.analysis.report.sections import timelines

    by_id = timelines.rows_by_case(load_run(run))
    assert sorted(by_id) == ["nosplit", "one", "two"] and by_id["two"]["op"] == "fsdp"
    assert not hasattr(steps_section, "_rows_by_case")
