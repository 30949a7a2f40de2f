"""Memory planned per Case (measure/memory.py, the runner's _MemoryBudget), on the CPU: the GPU's
free memory comes from a stand-in at the one boundary (memory.probe), the family is a fake with a
plan, so the skip, the out-of-memory reason and the release after a failure are tested here."""
from __future__ import annotations

import gc
import json
import weakref

import pytest

from commbench import runner, safety
from commbench.comm.agree import agree
from commbench.comm.context import RankContext
from commbench.families.base import Case, Family, Traffic
from commbench.measure import memory
from commbench.measure.memory import GIB, MemoryPlan
from commbench.measure.state import CaseState
from commbench.world import World

H100 = "NVIDIA H100 80GB HBM3"


class OneRank:
    """mpi4py's calls the runner makes, for a single rank."""

    def allgather(self, obj):
        return [obj]

    def gather(self, obj, root=0):
        return [obj]

    def allreduce(self, value):
        return value

    def bcast(self, obj, root=0):
        return obj

    def Barrier(self):
        pass


def ctx(ranks_per_gpu: int = 1) -> RankContext:
    world = World(rank=0, size=1, local_rank=0, local_size=1, num_nodes=1, hostname="h", hosts=("h",),
                  comm=OneRank())
    return RankContext(world=world, device="cuda:0", ranks_per_gpu=ranks_per_gpu)


class Held:
    """Stands for a Case's device buffers: the test asks whether it was freed."""


class FakeFamily(Family):
    name = "fake"
    needs_gpu = True

    def __init__(self, plan: MemoryPlan | None, fail: str | None = None):
        self.plan, self.fail, self.setups, self.held = plan, fail, 0, None

    def memory_bytes(self, case, world_size):
        return self.plan

    def setup(self, case, ctx):
        self.setups += 1
        held = Held()
        self.held = weakref.ref(held)

        def build():
            buffers = held   # noqa: F841 - a frame local, as a family's set-up holds its buffers
            raise RuntimeError(self.fail)
        if self.fail:
            agree(ctx.world, build, "allocating")   # the family path that made the cycle
        state = CaseState(measure=lambda w, n: [10.0] * n)
        state.extra["held"] = 1
        return state

    def check(self, state):
        return 0

    def traffic(self, case, world_size):
        return Traffic(1000.0, 1.0)


def case() -> Case:
    return Case(suite="s", bench="b", family="fake", op="x", backend="nccl", variant="default", env=(),
                dtype="float32", size_bytes=1024, params=(), warmup=1, iters=3, timing="auto", ranks=1,
                ranks_per_node=1, timeout_s=60)


@pytest.fixture
def gpu_with(monkeypatch):
    """A stand-in GPU: memory.probe answers (free bytes, name) as the test sets it."""
    monkeypatch.setenv(safety.EXPECTED_VAR, json.dumps(safety.active_kill_switches(), sort_keys=True))
    free = {"bytes": int(80 * GIB)}
    monkeypatch.setattr(memory, "probe", lambda device: (free["bytes"], H100))
    return free


def measure(fam: FakeFamily, context: RankContext, monkeypatch) -> dict:
    monkeypatch.setattr(runner, "get_family", lambda name: fam)
    row, _ = runner.measure_case(case(), context, "log")
    return row


def test_plan_sums_resident_parts_and_the_largest_transient():
    plan = MemoryPlan.of({"weights": 20 * GIB, "buffers": 2 * GIB}, {"check": 3 * GIB, "build": 1 * GIB})
    assert plan.resident_bytes == int(22 * GIB)
    assert plan.peak_bytes == int(25 * GIB)
    assert plan.text() == "25.0 GiB: weights 20.0 GiB + buffers 2.0 GiB + at most 3.0 GiB (check)"
    assert MemoryPlan.of({"zero": 0}).parts == ()


def test_a_case_that_cannot_fit_is_skipped_with_the_gpu_named(gpu_with, monkeypatch):
    gpu_with["bytes"] = int(30 * GIB)
    fam = FakeFamily(MemoryPlan.of({"weights": 40 * GIB}))
    row = measure(fam, ctx(), monkeypatch)
    assert row["status"] == "skipped"
    assert row["reason"].startswith(f"needs 40.0 GiB per rank, 30.0 GiB free on {H100}")
    assert "weights 40.0 GiB" in row["reason"]
    assert fam.setups == 0   # nothing was allocated
    assert row["mem_estimate_bytes"] == int(40 * GIB) and row["mem_free_bytes"] == int(30 * GIB)


def test_the_row_says_what_torch_still_held_when_the_case_began(gpu_with, monkeypatch):
    monkeypatch.setattr(memory, "torch_held_bytes", lambda device: 3 << 20)
    row = measure(FakeFamily(MemoryPlan.of({"weights": 1 * GIB})), ctx(), monkeypatch)
    assert row["status"] == "ok" and row["mem_torch_held_bytes"] == 3 << 20
    monkeypatch.setattr(memory, "torch_held_bytes", lambda device: None)   # no torch on a GPU: no column
    assert "mem_torch_held_bytes" not in measure(FakeFamily(None), ctx(), monkeypatch)


def test_ranks_sharing_a_gpu_divide_its_free_memory(gpu_with, monkeypatch):
    fam = FakeFamily(MemoryPlan.of({"buffers": 30 * GIB}))
    alone = measure(fam, ctx(ranks_per_gpu=1), monkeypatch)
    assert alone["status"] == "ok", alone["reason"]
    shared = measure(fam, ctx(ranks_per_gpu=4), monkeypatch)
    assert shared["status"] == "skipped"
    assert f"20.0 GiB of 80.0 GiB free on {H100} (4 ranks share it)" in shared["reason"]


def test_the_headroom_counts(gpu_with, monkeypatch):
    gpu_with["bytes"] = int(40.5 * GIB)   # the plan fits, its headroom does not
    row = measure(FakeFamily(MemoryPlan.of({"weights": 40 * GIB})), ctx(), monkeypatch)
    assert row["status"] == "skipped" and "kept for the CUDA context" in row["reason"]


def test_without_a_plan_the_case_runs_unchecked(gpu_with, monkeypatch):
    gpu_with["bytes"] = 0
    row = measure(FakeFamily(None), ctx(), monkeypatch)
    assert row["status"] == "ok" and "mem_estimate_bytes" not in row
    assert row["mem_free_bytes"] == 0


def test_off_the_gpu_nothing_is_probed(monkeypatch):
    monkeypatch.setenv(safety.EXPECTED_VAR, json.dumps(safety.active_kill_switches(), sort_keys=True))
    monkeypatch.setattr(memory, "probe", lambda device: pytest.fail("probed a CPU rank"))
    c = ctx()
    c.device = "cpu"
    row = measure(FakeFamily(MemoryPlan.of({"weights": 1e15})), c, monkeypatch)
    assert row["status"] == "ok" and "mem_estimate_bytes" not in row


def test_an_oom_fails_only_its_case_with_the_estimate_and_frees_it(gpu_with, monkeypatch):
    fam = FakeFamily(MemoryPlan.of({"weights": 10 * GIB}), fail="CUDA out of memory. Tried to allocate 2.00 GiB")
    gc.disable()
    try:
        row = measure(fam, ctx(), monkeypatch)
        assert row["status"] == "failed"
        assert "CUDA out of memory" in row["reason"]
        assert f"[memory: estimate 10.0 GiB: weights 10.0 GiB; 80.0 GiB was free for this rank on {H100}" \
               in row["reason"]
        assert fam.held() is None, "the failed set-up's buffers outlived its Case"
    finally:
        gc.enable()
    fam.fail = None
    assert measure(fam, ctx(), monkeypatch)["status"] == "ok"   # the next Case starts clean


def test_agree_leaves_no_cycle_behind():
    """A failure inside comm.agree used to keep the failing frame's locals (a family's buffers)
    alive until gc ran: the exception's traceback held agree's frame, which held the exception."""
    gone = {}

    def build():
        held = Held()
        gone["ref"] = weakref.ref(held)
        raise RuntimeError("CUDA out of memory")

    gc.disable()
    try:
        with pytest.raises(RuntimeError):
            agree(OneRank(), build, "allocating")
        assert gone["ref"]() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("reason, oom", [
    ("rank 0: OutOfMemoryError: CUDA out of memory. Tried to allocate", True),
    ("CudaError: cudaErrorMemoryAllocation", True),
    ("RuntimeError: nvshmem_malloc failed", True),
    ("RuntimeError: NCCL error: invalid usage", False),
])
def test_out_of_memory_is_recognised(reason, oom):
    assert memory.is_out_of_memory(reason) is oom
