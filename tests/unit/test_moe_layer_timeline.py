"""The MoE layer's split from a profiler trace: regions decide the kind, two-batch overlap's hidden
communication, the invariants on every layer row (CPU: traces built as Kineto writes them)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from commbench.families.moe import layer_timeline as lt
from commbench.measure.gpu_timeline import STEP_PREFIX
from commbench.measure.step_split import invariant_problems

MAIN, SIDE = 7, 20


class Trace:
    """Kineto's Chrome-trace events: host annotations, runtime launches, GPU records."""

    def __init__(self):
        self.events, self._corr, self.t_host = [], 0, 0.0

    def annotate(self, name, start, end):
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "ts": start, "dur": end - start})

    def kernel(self, name, stream, start, end, cat="kernel"):
        """A GPU record launched now (host clock advances 1 us per launch)."""
        self._corr += 1
        self.t_host += 1.0
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": self.t_host,
                            "dur": 0.5, "args": {"correlation": self._corr}})
        self.events.append({"ph": "X", "cat": cat, "name": name, "ts": start, "dur": end - start,
                            "args": {"correlation": self._corr, "stream": stream}})

    def region(self, part, mb, kernels):
        start = self.t_host + 0.1
        for k in kernels:
            self.kernel(*k)
        self.annotate(lt.region_label(part, mb), start, self.t_host + 0.1)

    def step(self, i, body):
        start = self.t_host + 0.05
        body()
        self.annotate(f"{STEP_PREFIX}{i}", start, self.t_host + 0.2)


def two_batch_step(tr: Trace, t0: float):
    """dispatch 0 exposed; dispatch 1 under experts 0; combine 0 under experts 1; combine 1 exposed.
    The dispatch's index_select is communication work by region, whatever its name says."""
    tr.region("dispatch", 0, [("indexSelectLargeIndex", SIDE, t0, t0 + 10),
                              ("ncclDevKernel_SendRecv", SIDE, t0 + 10, t0 + 40)])
    tr.region("experts", 0, [("nvjet_gemm_w13", MAIN, t0 + 40, t0 + 100),
                             ("nvjet_gemm_w2", MAIN, t0 + 100, t0 + 140)])
    tr.region("dispatch", 1, [("ncclDevKernel_SendRecv", SIDE, t0 + 45, t0 + 85)])
    tr.region("combine", 0, [("ncclDevKernel_SendRecv", SIDE, t0 + 140, t0 + 170),
                             ("index_add_kernel", SIDE, t0 + 170, t0 + 180)])
    tr.region("experts", 1, [("nvjet_gemm_w13", MAIN, t0 + 140, t0 + 240)])
    tr.region("combine", 1, [("ncclDevKernel_SendRecv", SIDE, t0 + 240, t0 + 280)])


def test_two_batch_split_and_hidden_communication_from_a_trace():
    tr = Trace()
    tr.kernel("warmup_gemm", MAIN, 0, 50)            # launched before any step: not the layer's
    tr.step(0, lambda: two_batch_step(tr, 100.0))
    tr.step(1, lambda: two_batch_step(tr, 400.0))
    windows, intervals = lt.layer_timeline(tr.events)
    assert windows == [(0.0, 300.0), (300.0, 580.0)]   # step 0 runs to step 1's first start
    assert {iv["region"] for iv in intervals} == {"dispatch.0", "dispatch.1", "experts.0", "experts.1",
                                                  "combine.0", "combine.1"}
    assert all(iv["kind"] == "comm" for iv in intervals if iv["name"].startswith(("index", "nccl")))
    step = lt.step_columns(intervals, *windows[1], two_batch=True)
    assert step["step_us"] == pytest.approx(280.0)
    assert step["comm_us"] == pytest.approx(160.0)          # 40 + 40 + 40 + 40
    assert step["compute_us"] == pytest.approx(200.0)
    assert step["exposed_comm_us"] == pytest.approx(80.0)   # dispatch 0 and combine 1
    assert step["overlap_pct"] == pytest.approx(50.0)
    assert step["idle_us"] == pytest.approx(0.0)
    assert (step["dispatch_us"], step["expert_us"], step["combine_us"]) == pytest.approx((80.0, 200.0, 80.0))
    assert step["tbo_hidden_us"] == pytest.approx(80.0)     # dispatch 1 and combine 0
    cols = lt.rank_columns(windows, intervals, two_batch=True)
    assert cols["step_us"] == pytest.approx(290.0)          # (300 + 280) / 2: step 0 waited 20 us
    assert cols["idle_us"] == pytest.approx(10.0)
    assert cols["tbo_gain_pct"] == pytest.approx(50.0)
    assert invariant_problems(cols) == []


def test_serial_layer_has_no_tbo_columns_and_counts_the_gaps_as_idle():
    tr = Trace()

    def body():
        tr.region("dispatch", 0, [("normal_dispatch", MAIN, 0, 30)])
        tr.region("experts", 0, [("pack_rows", MAIN, 35, 40), ("nvjet_gemm", MAIN, 40, 100)])
        tr.region("combine", 0, [("normal_combine", MAIN, 100, 130)])
    tr.step(0, body)
    windows, intervals = lt.layer_timeline(tr.events)
    cols = lt.rank_columns(windows, intervals, two_batch=False)
    assert cols["step_us"] == pytest.approx(130.0)
    assert (cols["comm_us"], cols["compute_us"], cols["exposed_comm_us"], cols["idle_us"]) == \
        pytest.approx((60.0, 65.0, 60.0, 5.0))
    assert cols["overlap_pct"] == pytest.approx(0.0)
    assert "tbo_hidden_us" not in cols and "tbo_gain_pct" not in cols
    assert invariant_problems(cols) == []


def test_a_copy_in_a_region_is_that_regions_and_an_unannotated_record_keeps_its_name_kind():
    tr = Trace()

    def body():
        tr.region("dispatch", 0, [("Memcpy DtoD (Device -> Device)", MAIN, 0, 20, "gpu_memcpy")])
        tr.region("experts", 0, [("nvjet_gemm", MAIN, 20, 60)])
        tr.kernel("stray_kernel", MAIN, 60, 70)       # in the step, outside every region
    tr.step(0, body)
    _windows, intervals = lt.layer_timeline(tr.events)
    kinds = {iv["name"]: (iv["kind"], iv.get("region")) for iv in intervals}
    assert kinds["Memcpy DtoD (Device -> Device)"] == ("comm", "dispatch.0")
    assert kinds["stray_kernel"] == ("compute", None)


def test_region_labels_round_trip_and_other_annotations_are_not_regions():
    assert lt.parse_region(lt.region_label("combine", 1)) == ("combine", 1)
    assert lt.parse_region("commbench.moe.layer") is None
    assert lt.parse_region(f"{STEP_PREFIX}3") is None
    assert lt.parse_region("commbench.moe.experts.x") is None


def test_the_row_takes_the_slowest_ranks_split_and_names_it(monkeypatch):
    from types import SimpleNamespace

    from commbench.families.moe import layer as layer_mod

    tr = Trace()
    tr.step(0, lambda: two_batch_step(tr, 100.0))
    windows, intervals = lt.layer_timeline(tr.events)
    monkeypatch.setattr(layer_mod.layer_profile, "profiled_steps", lambda state, iters: (windows, intervals, ""))
    slower = {**lt.rank_columns(windows, intervals, True), "step_us": 400.0, "idle_us": 120.0}

    class TwoRanks:
        def allgather(self, mine):
            return [mine, (slower, "")]
    state = SimpleNamespace(world=TwoRanks(), side=object(), extra={}, inter=64,
                            problem=SimpleNamespace(hidden=128, tokens=16, topk=2))
    layer_mod.LayerState._timeline_columns(state, 1)
    ex = state.extra
    assert ex["slowest_rank"] == 1 and ex["step_us"] == 400.0 and ex["idle_us"] == 120.0
    assert ex["comm_share"] == pytest.approx(160.0 / 400.0) and ex["expert_tflops"] > 0
    assert state.timeline == {"source": "cupti", "steps": windows, "intervals": intervals}

    monkeypatch.setattr(layer_mod.layer_profile, "profiled_steps", lambda state, iters: ([], [], "no CUPTI"))
    state.extra, state.timeline = {}, None
    layer_mod.LayerState._timeline_columns(state, 1)
    assert state.extra == {"timeline_note": "rank 0: no CUPTI"} and state.timeline is None


FIXTURES = Path(__file__).parent / "fixtures" / "moe_layer"


def test_a_trace_recorded_on_an_h200_gives_what_the_gpu_run_printed():
    """nccl_a2a, two_batch, 1 rank, 256 tokens of a small shape, 3 steps (tests/gpu/moe_layer_trace.py,
    H200, 2026-12-03): every record of a step has its region; NCCL and torch's gather / index_add
    kernels are communication by region, the expert pack and GEMM kernels compute."""
    events = json.loads((FIXTURES / "nccl_two_batch_trace.json").read_text())["traceEvents"]
    windows, intervals = lt.layer_timeline(events)
    assert len(windows) == 3 and all(iv.get("region") for iv in intervals)
    kinds = {(iv["region"].split(".")[0], iv["kind"]) for iv in intervals}
    assert kinds == {("dispatch", "comm"), ("combine", "comm"), ("experts", "compute")}
    def kinds_of(part):
        return {iv["kind"] for iv in intervals if part in iv["name"]}
    assert kinds_of("ncclDevKernel") == {"comm"} and kinds_of("pack_rows") == {"compute"}
    assert kinds_of("gather") == {"comm"}   # the row gather before the all2all: by name it is compute
    cols = lt.rank_columns(windows, intervals, two_batch=True)
    got = {k: round(cols[k], 2) for k in ("step_us", "compute_us", "comm_us", "exposed_comm_us", "idle_us",
                                           "dispatch_us", "expert_us", "combine_us", "tbo_hidden_us")}
    assert got == {"step_us": 1722.8, "compute_us": 156.03, "comm_us": 41.53, "exposed_comm_us": 41.53,
                   "idle_us": 1525.24, "dispatch_us": 14.12, "expert_us": 156.03, "combine_us": 27.4,
                   "tbo_hidden_us": 0.0}
    assert invariant_problems(cols) == []


class _ProfiledState:
    """What layer_profile needs of a LayerState: run (counted), regions, a stream, a world."""

    def __init__(self, fail=None):
        class Stream:
            def synchronize(self):
                pass

        class World:
            def barrier(self):
                pass

        self.stream, self.world, self.regions, self.runs, self.fail = Stream(), World(), False, 0, fail
        self.regions_seen = []

    def run(self):
        self.runs += 1
        self.regions_seen.append(self.regions)
        if self.fail:
            raise self.fail


def test_the_profiled_batch_leaves_a_running_profiler_alone_and_still_runs_capped():
    """--profile torch: a second profiler would end the first one's session; the batch runs anyway
    (the other ranks' collectives need it), at most PROFILED_STEPS steps."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from commbench.families.moe import layer_profile
    from commbench.measure.step_split import PROFILED_STEPS

    state = _ProfiledState()
    with profile(activities=[ProfilerActivity.CPU]):
        windows, intervals, note = layer_profile.profiled_steps(state, 50)
        assert torch._C._autograd._profiler_enabled()   # the outer profiler still runs
    assert (windows, intervals) == ([], []) and "another torch profiler is running" in note
    assert state.runs == PROFILED_STEPS and state.regions_seen == [False] * PROFILED_STEPS


def test_a_profiler_that_fails_to_stop_never_hides_the_batchs_own_error(monkeypatch):
    pytest.importorskip("torch")
    from commbench.families.moe import layer_profile

    class BadProfiler:
        def __exit__(self, *exc):
            raise RuntimeError("CUPTI went away")

    monkeypatch.setattr(layer_profile, "_start", lambda: (BadProfiler(), ""))
    state = _ProfiledState(fail=ValueError("the layer failed"))
    with pytest.raises(ValueError, match="the layer failed"):
        layer_profile.profiled_steps(state, 3)
    assert state.regions is False
    ok = _ProfiledState()
    assert layer_profile.profiled_steps(ok, 3) == ([], [], "the profiler did not stop: RuntimeError: CUPTI went away")
    assert ok.runs == 3 and ok.regions_seen == [True] * 3


def test_a_layer_of_no_length_has_no_comm_share(monkeypatch):
    from types import SimpleNamespace

    from commbench.families.moe import layer as layer_mod

    cols = {"step_us": 0.0, "compute_us": 0.0, "comm_us": 0.0, "copy_us": 0.0, "exposed_comm_us": 0.0,
            "overlap_pct": None, "idle_us": 0.0, "expert_us": 0.0}
    monkeypatch.setattr(layer_mod.layer_profile, "profiled_steps", lambda state, iters: ([(0.0, 0.0)], [], ""))
    monkeypatch.setattr(layer_mod.layer_timeline, "rank_columns", lambda w, i, two: dict(cols))

    class OneRank:
        def allgather(self, mine):
            return [mine]
    state = SimpleNamespace(world=OneRank(), side=None, extra={}, inter=64,
                            problem=SimpleNamespace(hidden=128, tokens=16, topk=2))
    layer_mod.LayerState._timeline_columns(state, 1)
    assert state.extra["comm_share"] is None and state.extra["expert_tflops"] is None
