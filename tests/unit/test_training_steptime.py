"""The training step's timing on the CPU (families/training/steptime.py): time_us comes from the
timed steps, which nothing records; the split from a capped profiled batch after them."""
from __future__ import annotations

import time

import pytest

from commbench.families.training import steptime
from commbench.measure import step_split
from commbench.measure.host_timeline import HostTimeline


class FakeComm:
    def __init__(self):
        self.mode, self.timeline, self.recording, self.log = "full", None, False, []

    def start_recording(self):
        self.recording = True


class FakeSchedule:
    """A step that computes 200 us, then 'communicates' 100 us while the host waits, reporting the
    collective and the wait to the host timeline when one is set; it notes who recorded it."""

    def __init__(self, comm):
        self.comm, self.calls = comm, []

    def step(self, timer):
        self.calls.append((self.comm.mode, self.comm.timeline is not None))
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 200e-6:
            pass
        timer.mark("fwd")
        tl = self.comm.timeline
        token = tl.comm_started("all_gather") if tl is not None else None
        start = time.perf_counter_ns() / 1e3
        if self.comm.mode == "full":
            time.sleep(100e-6)
        if tl is not None:
            end = time.perf_counter_ns() / 1e3
            tl.blocked(start, end)
            tl.comm_done(token, end)
        timer.mark("bwd")

    def drain(self):
        pass


class FakeReplay:
    def __init__(self, log, comm):
        self.comm = comm

    def step(self):
        time.sleep(50e-6)

    def drain(self):
        pass


@pytest.mark.parametrize("iters", [3, 12])
def test_the_timed_steps_are_not_recorded_and_a_capped_batch_is(monkeypatch, iters):
    monkeypatch.setattr(steptime, "Replay", FakeReplay)
    comm = FakeComm()
    sched = FakeSchedule(comm)
    timeline = HostTimeline()
    modes = steptime.run_modes(sched, comm, 2, iters, False, lambda: None, lambda: None, timeline)
    profiled = step_split.profiled_steps(iters)
    assert len(modes["step"][0]) == iters and len(modes["compute"][0]) == iters
    assert len(timeline.windows) == profiled
    recorded = [rec for _mode, rec in sched.calls]
    # warm-up (2), timed (iters), profiled, then the compute mode's warm-up and batch
    assert recorded == [False] * (2 + iters) + [True] * profiled + [False] * (2 + iters)
    assert comm.timeline is None and comm.mode == "full"

    mine = steptime.rank_result(modes, timeline, iters)
    assert mine["note"] == "" and len(mine["splits"]) == profiled
    assert steptime.samples(mine) == modes["step"][0]          # time_us: the timed steps
    cols = steptime.summarize([mine, mine])
    assert cols["profiled_steps"] == profiled and cols["slowest_rank"] in (0, 1)
    assert step_split.invariant_problems(cols) == []
    assert sum(cols[c] for c in step_split.SHARE_COLUMNS.values()) == pytest.approx(100.0)
    assert cols["comm_us"] > 0 and cols["exposed_comm_us"] > 0
    samples = steptime.sample_columns(mine)
    assert len(samples["step_us"]) == profiled and len(samples["fwd_us"]) == iters
    assert samples["step_us"] == [s["step_us"] for s in mine["splits"]]


def test_a_timeline_with_the_wrong_step_count_gives_a_note_not_a_split(monkeypatch):
    monkeypatch.setattr(steptime, "Replay", FakeReplay)
    comm = FakeComm()
    timeline = HostTimeline()
    modes = steptime.run_modes(FakeSchedule(comm), comm, 1, 4, False, lambda: None, lambda: None, timeline)
    timeline._windows.pop()
    mine = steptime.rank_result(modes, timeline, 4)
    assert mine["note"] == "the timeline has 3 step(s) of 4"
    cols = steptime.summarize([mine])
    assert cols["timeline_note"] == "rank 0: the timeline has 3 step(s) of 4"
    assert "step_us" not in cols and "compute_us" not in cols
    assert steptime.samples(mine) == modes["step"][0]
