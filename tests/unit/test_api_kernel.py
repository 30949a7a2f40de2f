"""API-level and kernel-only time (measure/api_kernel.py): which ranges count, how ranks and calls
reduce, and when the runner asks for them. The GPU side (real profiler attribution) is checked by
the GPU session's shared-moe step, whose rows must carry both columns."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from commbench.measure import api_kernel as ak
from commbench.measure.state import CaseState


def _ev(name: str, device_us: float, device_type: str = "CPU", attr: str = "device_time_total"):
    return SimpleNamespace(name=name, device_type=SimpleNamespace(name=device_type), **{attr: device_us})


def test_each_call_gets_the_device_time_of_its_own_host_range():
    events = [_ev(ak.RANGE_PREFIX + "0", 12.0), _ev(ak.RANGE_PREFIX + "1", 30.0),
              _ev(ak.RANGE_PREFIX + "2", 15.5), _ev("aten::copy_", 99.0)]
    assert ak.attributed_us(events, 3) == [12.0, 30.0, 15.5]


def test_the_device_copy_of_a_range_and_foreign_names_are_not_counted():
    events = [_ev(ak.RANGE_PREFIX + "0", 10.0), _ev(ak.RANGE_PREFIX + "0", 500.0, device_type="CUDA"),
              _ev(ak.RANGE_PREFIX + "x", 7.0), _ev(ak.RANGE_PREFIX + "9", 7.0)]
    assert ak.attributed_us(events, 2) == [10.0, 0.0]


def test_older_torch_names_the_total_cuda_time_total():
    assert ak.attributed_us([_ev(ak.RANGE_PREFIX + "0", 4.0, attr="cuda_time_total")], 1) == [4.0]


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
    assert ak.attributed_us(prof.events(), 3) == [0.0, 0.0, 0.0]   # no device on this machine
