"""The harness's known-answer overlap Case (families/harness/overlap.py): its answers by construction,
its tolerance, what it refuses, and a step as a GPU runs it."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from commbench.families.harness import overlap
from commbench.measure import step_split


@pytest.mark.parametrize("placement, exposed, overlap_pct, step", [
    ("under", 0.0, 100.0, 2000.0), ("half", 500.0, 50.0, 2500.0), ("after", 1000.0, 0.0, 3000.0)])
def test_the_known_answers_by_construction(placement, exposed, overlap_pct, step):
    want = overlap.expected(placement, 2000.0, 1000.0)
    assert want == {"step_us": step, "comm_us": 1000.0, "compute_us": 2000.0, "exposed_comm_us": exposed,
                    "overlap_pct": overlap_pct}
    measured = {**want, "idle_us": 3.0, "exposed_comm_us": exposed + 40.0}   # within 5% of K
    assert overlap.misses(measured, want) == []
    off = overlap.misses({**measured, "exposed_comm_us": exposed + 60.0}, want)
    assert len(off) == 1 and off[0].startswith("exposed_comm_us")


def test_the_overlap_case_runs_on_cuda_only_and_binds_a_gpu():
    from types import SimpleNamespace

    from commbench.families.harness.family import FAMILY

    def case(op, backend, **params):
        return SimpleNamespace(op=op, backend=backend, ranks=1, param=lambda k, d=None: params.get(k, d))

    assert FAMILY.impossible(case("overlap", "cuda")) is None
    assert FAMILY.impossible(case("overlap", "mpi"))[0] == "backends"
    assert FAMILY.impossible(case("barrier", "cuda"))[0] == "backends"
    assert FAMILY.impossible(case("overlap", "cuda", placement="under", spin_comm_us=3000.0,
                                  spin_compute_us=1000.0))[0] == "params.spin_comm_us"
    assert FAMILY.impossible(case("overlap", "cuda", placement="half", spin_comm_us=2500.0,
                                  spin_compute_us=1000.0))[0] == "params.spin_comm_us"
    assert FAMILY.impossible(case("overlap", "cuda", placement="after", spin_comm_us=2500.0,
                                  spin_compute_us=100.0)) is None
    assert FAMILY.needs_gpu_for(case("overlap", "cuda")) and not FAMILY.needs_gpu_for(case("spin", "mpi"))


@pytest.mark.parametrize("placement, c, k", [("under", 2000.0, 1000.0), ("half", 2000.0, 1000.0),
                                             ("after", 2000.0, 1000.0), ("half", 1500.0, 2500.0),
                                             ("under", 400.0, 100.0), ("half", 400.0, 100.0)])
def test_a_known_answer_step_as_the_gpu_runs_it_meets_its_answer(placement, c, k):
    """Three steps back to back with the launch gaps a GPU shows (1.5 us between kernels of a stream,
    3 us before the stand-in starts after its event, 2 us between steps)."""
    o = overlap.offset_us(placement, c, k)
    intervals, windows, t = [], [], 0.0
    for _ in range(3):
        spins = [(t, t + o), (t + o + 1.5, t + c + 1.5)] if 0 < o < c else [(t, t + c)]
        comm = (t + o + 3.0, t + o + 3.0 + k)
        intervals += [{"kind": "compute", "start_us": s, "end_us": e} for s, e in spins]
        intervals.append({"kind": "comm", "start_us": comm[0], "end_us": comm[1]})
        end = max(spins[-1][1], comm[1]) + 2.0
        windows.append((t, end))
        t = end
    split = step_split.mean_split(step_split.split_steps(intervals, windows))
    assert overlap.misses(split, overlap.expected(placement, c, k)) == []


@pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                    reason="nvcc not installed: CUDA sources cannot be compiled here")
def test_the_spin_kernels_compile_for_sm90():
    from commbench import jit

    jit.compile_check("harness_spin", arch="sm_90")


class _Stream:
    def synchronize(self):
        pass


class _Timeline:
    """A timeline that recorded ``steps`` windows (or none, with a note)."""

    source = "cupti"

    def __init__(self, steps: int, note: str = ""):
        from contextlib import nullcontext

        self.note, self.capture, self.step = note, nullcontext, lambda i: nullcontext()
        self.windows = [(i * 3000.0, (i + 1) * 3000.0) for i in range(steps)]
        self.intervals = [iv for s, _e in self.windows for iv in (
            {"kind": "compute", "start_us": s, "end_us": s + 2000.0},
            {"kind": "comm", "start_us": s + 2000.0, "end_us": s + 3000.0})]


class _World:
    """Rank ``rank`` of two; the other rank sends ``other`` to the gather."""

    def __init__(self, rank: int, other):
        self.rank, self.other, self.gathered = rank, other, 0

    def barrier(self):
        pass

    def allgather(self, mine):
        self.gathered += 1
        return [mine, self.other] if self.rank == 0 else [self.other, mine]


def _state(world):
    return overlap.OverlapState(world=world, placement="after", compute_us=2000.0, comm_us=1000.0,
                                stream=_Stream(), side=_Stream(), count=1,
                                extra={f"expected_{k}": v
                                       for k, v in overlap.expected("after", 2000.0, 1000.0).items()})


@pytest.mark.parametrize("mine_ok", [True, False])
def test_a_rank_without_a_timeline_fails_every_rank_after_the_gather(monkeypatch, mine_ok):
    """A rank that raised before the gather would leave the others waiting in it: every rank gathers
    (note, split) first, then all fail with the same reason."""
    from commbench.measure import gpu_timeline

    monkeypatch.setattr(overlap, "step", lambda state: None)
    monkeypatch.setattr(gpu_timeline, "GpuTimeline",
                        lambda comm_names=(): _Timeline(3) if mine_ok else _Timeline(0, "no CUPTI"))
    other = ("no CUPTI", {}) if mine_ok else ("", {"step_us": 3000.0})
    world = _World(1, other)
    with pytest.raises(RuntimeError) as err:
        overlap.measure(_state(world), 1, 3)
    assert world.gathered == 1
    assert f"rank {0 if mine_ok else 1}: no CUPTI" in str(err.value)


def test_every_rank_with_a_timeline_takes_the_slowest_ranks_split(monkeypatch):
    from commbench.measure import gpu_timeline

    monkeypatch.setattr(overlap, "step", lambda state: None)
    monkeypatch.setattr(gpu_timeline, "GpuTimeline", lambda comm_names=(): _Timeline(3))
    mine = step_split.mean_split(step_split.split_steps(_Timeline(3).intervals, _Timeline(3).windows))
    world = _World(0, ("", {**mine, "step_us": 3100.0, "idle_us": mine["idle_us"] + 100.0}))
    state = _state(world)
    assert overlap.measure(state, 1, 3) == [3000.0] * 3
    assert state.extra["slowest_rank"] == 1 and state.extra["idle_share_pct"] == pytest.approx(100 * 100 / 3100)
