"""API-level and kernel-only time (measure/api_kernel.py): which ranges count, how ranks and calls
reduce, and when the runner asks for them. The GPU side (real profiler attribution) is checked by
the GPU session's shared-moe step, whose rows must carry both columns."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from commbench.measure import api_kernel as ak
from commbench.measure.state import CaseState


def _ev(name: str, start: float, end: float, device_type: str = "CPU", annotation: bool = False):
    return SimpleNamespace(name=name, device_type=SimpleNamespace(name=device_type),
                           time_range=SimpleNamespace(start=start, end=end), is_user_annotation=annotation)


def _kernel(name: str, start: float, end: float):
    return _ev(name, start, end, device_type="CUDA")


def test_each_call_gets_the_device_activity_that_starts_in_its_window():
    # kernels launched from native code belong to no torch op: they count by time, not by owner
    events = [_ev(ak.RANGE_PREFIX + "0", 0, 5), _kernel("void moe::ll_dispatch", 3, 15),
              _kernel("Memcpy DtoD (Device -> Device)", 16, 18),
              _ev(ak.RANGE_PREFIX + "1", 100, 104), _kernel("ncclDevKernel_SendRecv", 102, 132),
              _ev(ak.RANGE_PREFIX + "2", 200, 201), _kernel("deep_ep::dispatch", 203, 210)]
    assert ak.attributed_us(events, 3) == [14.0, 30.0, 7.0]


def test_kernels_that_overlap_on_two_streams_count_once():
    events = [_ev(ak.RANGE_PREFIX + "0", 0, 1), _kernel("a", 2, 12), _kernel("b", 5, 20), _kernel("c", 30, 31)]
    assert ak.attributed_us(events, 1) == [19.0]


def test_device_side_annotations_and_host_ops_are_not_activity():
    events = [_ev(ak.RANGE_PREFIX + "0", 0, 2), _ev(ak.RANGE_PREFIX + "0", 1, 500, device_type="CUDA"),
              _ev("nccl:all_to_all", 1, 2), _ev("nccl:all_to_all", 2, 40, device_type="CUDA"),
              _ev("record_param_comms", 3, 90, device_type="CUDA", annotation=True),
              _kernel("k", 4, 10), _ev("aten::copy_", 1, 400)]
    assert ak.attributed_us(events, 1) == [6.0]


def test_foreign_range_names_and_calls_beyond_the_count_are_ignored():
    events = [_ev(ak.RANGE_PREFIX + "0", 0, 1), _kernel("k", 2, 4), _ev(ak.RANGE_PREFIX + "x", 10, 11),
              _ev(ak.RANGE_PREFIX + "9", 50, 51), _kernel("late", 52, 60)]
    # call 9 is not one of 2 calls: its window does not cut call 0's, call 1 was never seen
    assert ak.attributed_us(events, 2) == [10.0, 0.0]


def test_columns_take_the_median_over_calls_of_the_slowest_rank():
    ranks = [{"api_us": [10.0, 50.0, 12.0], "kernel_only_us": [5.0, 6.0, 7.0], "note": ""},
             {"api_us": [11.0, 9.0, 30.0], "kernel_only_us": [4.0, 8.0, 5.0], "note": ""}]
    cols = ak.columns(ranks)
    # slowest per call: api 11, 50, 30 -> median 30; kernels 5, 8, 7 -> 7
    assert cols == {"api_us": 30.0, "kernel_only_us": 7.0, "api_calls": 3}


def test_a_rank_without_kernel_times_empties_the_column_and_says_why():
    ranks = [{"api_us": [10.0], "kernel_only_us": [5.0], "note": ""},
             {"api_us": [12.0], "kernel_only_us": None, "note": "kernel_only_us: the torch profiler did not start: X"}]
    cols = ak.columns(ranks)
    assert cols["api_us"] == 12.0 and cols["kernel_only_us"] is None
    assert "did not start" in cols["api_note"]


def test_no_rank_measured_gives_no_columns():
    assert ak.columns([{}, {}]) == {}


class _Fam:
    def __init__(self):
        self.calls = 0

    def run(self, state):
        self.calls += 1


@pytest.mark.parametrize("state", [CaseState(api_calls=0, stream=object()),      # not asked
                                   CaseState(api_calls=5, stream=None),          # a host op
                                   CaseState(api_calls=5, stream=object(),       # times itself
                                             measure=lambda w, i: [1.0])])
def test_the_runner_makes_no_calls_where_the_state_asks_for_none(state):
    fam = _Fam()
    assert ak.for_state(fam, state, SimpleNamespace(barrier=lambda: None)) == {}
    assert fam.calls == 0


def test_the_moe_family_asks_every_row_for_api_and_kernel_time_by_default():
    from commbench.families.moe.family import FAMILY

    prm = FAMILY.params["api_calls"]
    assert prm.default > 0 and prm.range == (0, ak.MAX_API_CALLS)


def test_the_real_profiler_names_and_types_the_ranges_as_read_here():
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(3):
            with record_function(f"{ak.RANGE_PREFIX}{i}"):
                torch.ones(64).sum()
    seen = [e for e in prof.events() if e.name.startswith(ak.RANGE_PREFIX)]
    assert len(seen) == 3 and not any(ak._on_device(e) for e in seen)
    assert all(e.time_range.end >= e.time_range.start > 0 or e.time_range.start == 0 for e in seen)
    assert ak.attributed_us(prof.events(), 3) == [0.0, 0.0, 0.0]   # no device on this machine
