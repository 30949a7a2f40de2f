"""The step split (measure/step_split.py) on timelines of every kind (fixtures), the Kineto reader
(measure/gpu_timeline.py), the host timeline, the runner's invariant check and the timeline
files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from commbench import runner, spans
from commbench.measure import gpu_timeline, host_timeline, step_split

FIXTURES = Path(__file__).parent / "fixtures" / "timelines"
SPLIT_FIXTURES = sorted(p for p in FIXTURES.glob("*.json") if "traceEvents" not in json.loads(p.read_text()))


def _same(got: dict, want: dict, tol: float = 1e-6) -> None:
    for key, value in want.items():
        if value is None:
            assert got[key] is None, key
        else:
            assert got[key] == pytest.approx(value, abs=tol), key


@pytest.mark.parametrize("path", SPLIT_FIXTURES, ids=lambda p: p.stem)
def test_each_recorded_timeline_splits_as_expected(path):
    doc = json.loads(path.read_text())
    splits = step_split.split_steps(doc["intervals"], [tuple(s) for s in doc["steps"]])
    assert len(splits) == len(doc["expected"])
    for got, want in zip(splits, doc["expected"]):
        _same(got, want, doc.get("tolerance_us", 1e-6))   # recorded ones: what the GPU run reported
        assert step_split.invariant_problems(got) == []
        assert got["compute_us"] + got["exposed_comm_us"] + got["idle_us"] == pytest.approx(got["step_us"])


def test_the_fixtures_cover_every_kind():
    names = {p.stem for p in SPLIT_FIXTURES}
    assert {"fully_under", "half_under", "after", "no_comm", "two_comm_streams", "nested_same_kind"} <= names
    assert {"recorded_known_half_h200", "recorded_fsdp_shared2_h200"} <= names   # from a GPU run


def test_union_and_subtract():
    assert spans.union([(5, 8), (0, 2), (1, 3), (8, 9), (4, 4)]) == [(0, 3), (5, 9)]
    assert spans.subtract([(0, 10)], [(2, 3), (5, 12)]) == [(0, 2), (3, 5)]
    assert spans.subtract([(0, 10), (20, 30)], [(-5, 1), (25, 26)]) == [(1, 10), (20, 25), (26, 30)]
    assert spans.length([(0, 3), (1, 4)]) == 4


def test_the_mean_of_steps_keeps_the_identity_and_the_slowest_rank_is_named():
    splits = [step_split.split_window([{"kind": "compute", "start_us": 0, "end_us": c},
                                       {"kind": "comm", "start_us": c - 10, "end_us": c + e}], 0, c + e + i)
              for c, e, i in ((100, 5, 1), (90, 30, 0), (120, 0, 7))]
    mean = step_split.mean_split(splits)
    assert mean["compute_us"] + mean["exposed_comm_us"] + mean["idle_us"] == pytest.approx(mean["step_us"])
    assert 0 <= mean["overlap_pct"] <= 100
    rank, split = step_split.slowest([{"step_us": 5.0}, {"step_us": 9.0}, {"step_us": 7.0}])
    assert (rank, split) == (1, {"step_us": 9.0})


GOOD = {"step_us": 100.0, "compute_us": 70.0, "comm_us": 40.0, "exposed_comm_us": 20.0, "overlap_pct": 50.0,
        "idle_us": 10.0, "status": "ok"}


@pytest.mark.parametrize("change, says", [
    ({"exposed_comm_us": 50.0, "idle_us": -20.0}, "exposed_comm_us 50.0 > comm_us 40.0"),
    ({"overlap_pct": 130.0}, "overlap_pct 130.0 outside 0..100"),
    ({"idle_us": 20.0}, "!= step_us 100.0"),
    ({"exposed_comm_us": -5.0, "idle_us": 35.0}, "exposed_comm_us -5.0 < 0"),
])
def test_the_runner_marks_a_row_that_breaks_an_invariant_wrong(change, says):
    _ok_then_wrong(dict(GOOD), change, says)


def _ok_then_wrong(row: dict, change: dict, says: str) -> None:
    """The runner passes ``row`` as it is and marks it wrong, saying ``says``, after ``change``."""
    runner.apply_split_invariants(row)
    assert row["status"] == "ok"
    row.update(change)
    runner.apply_split_invariants(row)
    assert row["status"] == "wrong" and says in row["reason"], row["reason"]


def test_the_identity_has_a_tolerance_and_rows_without_a_split_pass():
    row = {**GOOD, "idle_us": 10.0 + 0.4}   # 0.4 us off a 100 us step: inside max(2 us, 0.5%)
    assert step_split.invariant_problems(row) == []
    assert step_split.tolerance_us(10_000.0) == 50.0 and step_split.tolerance_us(10.0) == 2.0
    assert step_split.invariant_problems({"time_us": 5.0, "comm_us": 3.0}) == []
    assert step_split.invariant_problems({**GOOD, "overlap_pct": float("nan")}) == []   # an empty cell


def test_kineto_records_become_classified_steps():
    doc = json.loads((FIXTURES / "kineto_two_steps.json").read_text())
    windows, intervals = gpu_timeline.rebase(*gpu_timeline.steps_from_trace(doc["traceEvents"]))
    assert [list(w) for w in windows] == doc["steps"]
    kinds = {iv["name"].split("(")[0]: iv["kind"] for iv in intervals}
    assert kinds["ncclDevKernel_AllGather_RING_LL"] == "comm"
    assert kinds["Memcpy PtoP "] == "comm" and kinds["Memcpy DtoD "] == "copy" and kinds["Memset "] == "copy"
    assert not any(iv["start_us"] < 0 for iv in intervals)   # the kernel launched before the steps is left out
    for got, want in zip(step_split.split_steps(intervals, windows), doc["expected"]):
        _same(got, want)


def test_classify_by_name():
    c = gpu_timeline.classify
    assert c("ncclKernel_AllReduce_RING_LL_Sum_float", "kernel") == "comm"
    assert c("void deep_ep::intranode::dispatch<8, 768>(...)", "kernel") == "comm"
    assert c("void ll_dispatch<128>(...)", "kernel") == "comm"
    assert c("void pack_rows(...)", "kernel") == "compute"
    assert c("commbench_comm_standin(long long)", "kernel") == "compute"
    assert c("commbench_comm_standin(long long)", "kernel", ["commbench_comm_standin"]) == "comm"
    assert c("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy") == "copy"


def test_the_host_timeline_counts_waits_as_exposed_or_idle(monkeypatch):
    clock = iter([0.0, 10.0, 100.0])   # step start, the collective's issue, step end
    monkeypatch.setattr(host_timeline, "now_us", lambda: next(clock))
    tl = host_timeline.HostTimeline()
    with tl.capture(), tl.step(0):
        token = tl.comm_started("all_gather")
        tl.comm_done(token, 70.0)      # the transport's report
        tl.comm_done(token, 90.0)      # the wait's, later: the first report stands
        tl.blocked(60.0, 90.0)         # the host waited from 60 to 90
    split = step_split.split_steps(tl.intervals, tl.windows)[0]
    _same(split, {"step_us": 100, "comm_us": 60, "compute_us": 70, "exposed_comm_us": 10, "idle_us": 20})


def test_timeline_files_round_trip_and_refuse_a_bad_shape(tmp_path):
    from commbench.errors import RunFolderError
    from commbench.runfolder import files, step_timelines

    ivs = [{"kind": "comm", "stream": 13, "start_us": 1.0, "end_us": 2.5, "name": "ncclDevKernel_x"}]
    rel = step_timelines.write(tmp_path, "abc123", 1, "cupti", [(0.0, 3.0)], ivs)
    assert rel == "timeline/abc123.r1.json" and step_timelines.ranks_of(tmp_path, "abc123") == [1]
    doc = step_timelines.read(tmp_path, "abc123", 1)
    assert doc["steps"] == [[0.0, 3.0]] and doc["intervals"] == ivs and doc["source"] == "cupti"
    files.write_atomic(tmp_path, "timeline/bad.r0.json", json.dumps(
        {"steps": [[0, 1]], "intervals": [{"kind": "gpu", "start_us": 0, "end_us": 1}]}).encode())
    with pytest.raises(RunFolderError, match="interval 0"):
        step_timelines.read(tmp_path, "bad", 0)


def test_a_running_profiler_is_left_alone():
    """--profile torch runs its own profiler around the batch: a second one would end its session."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as outer:
        tl = gpu_timeline.GpuTimeline()
        with tl.capture():
            with tl.step(0):
                torch.ones(4).sum()
    assert "another torch profiler is running" in tl.note and tl.windows == []
    assert any(e.name == gpu_timeline.STEP_PREFIX + "0" for e in outer.events())


def test_the_critical_paths_shares_sum_to_100_and_the_slowest_rank_carries_them():
    doc = json.loads((FIXTURES / "half_under.json").read_text())
    splits = step_split.split_steps(doc["intervals"], [tuple(s) for s in doc["steps"]])
    fast = {**step_split.mean_split(splits)}
    slow = {**fast, "step_us": fast["step_us"] + 50.0, "idle_us": fast["idle_us"] + 50.0}
    rank, row = step_split.slowest([fast, slow])
    assert rank == 1
    got = [row[c] for c in step_split.SHARE_COLUMNS.values()]
    assert sum(got) == pytest.approx(100.0)
    assert row["exposed_share_pct"] == pytest.approx(100 * slow["exposed_comm_us"] / slow["step_us"])
    assert row["idle_share_pct"] == pytest.approx(100 * slow["idle_us"] / slow["step_us"])
    assert step_split.invariant_problems(row) == []
    assert step_split.shares({"step_us": 0.0, "compute_us": 0.0}) == {}


@pytest.mark.parametrize("change, says", [
    ({"idle_share_pct": 30.0}, "the shares sum to 120.00, not 100"),
    ({"compute_share_pct": 110.0, "exposed_share_pct": -10.0, "idle_share_pct": 0.0},
     "compute_share_pct 110.0 outside"),
])
def test_shares_that_do_not_add_up_make_the_row_wrong(change, says):
    _ok_then_wrong({**GOOD, "compute_share_pct": 70.0, "exposed_share_pct": 20.0,
                    "idle_share_pct": 10.0}, change, says)


def test_a_profiled_batch_is_capped():
    assert step_split.profiled_steps(100) == step_split.PROFILED_STEPS
    assert step_split.profiled_steps(3) == 3 and step_split.profiled_steps(0) == 1


def test_innermost_span_of_each_time_by_one_sweep():
    spans = [(0, 100, "outer"), (10, 20, "a"), (12, 15, "a.inner"), (30, 40, "b"), (200, 210, "c")]
    times = [11, 13, 15, 25, 35, 150, None, 205, -1]
    assert gpu_timeline.innermost(spans, times) == ["a", "a.inner", "a.inner", "outer", "b", None, None, "c", None]


def test_records_carry_the_region_their_launch_was_in():
    def x(cat, name, ts, dur, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": args}
    events = [x("user_annotation", gpu_timeline.STEP_PREFIX + "0", 0, 50),
              x("user_annotation", "fam.part.0", 1, 10), x("user_annotation", "fam.part.0.deep", 2, 3),
              x("cuda_runtime", "cudaLaunchKernel", 3, 1, correlation=1),
              x("cuda_runtime", "cudaLaunchKernel", 8, 1, correlation=2),
              x("cuda_runtime", "cudaLaunchKernel", 20, 1, correlation=3),
              x("kernel", "k1", 100, 5, correlation=1, stream=7), x("kernel", "k2", 105, 5, correlation=2, stream=7),
              x("kernel", "k3", 110, 5, correlation=3, stream=7)]
    _w, ivs = gpu_timeline.steps_from_trace(events, region_prefix="fam.")
    assert {iv["name"]: iv.get("region") for iv in ivs} == {"k1": "part.0.deep", "k2": "part.0", "k3": None}
    _w, plain = gpu_timeline.steps_from_trace(events)
    assert not any("region" in iv for iv in plain)
