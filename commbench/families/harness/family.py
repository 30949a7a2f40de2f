"""Harness self-checks: MPI barrier latency, a known-length spin, deliberate hang/crash Cases, and
the known-answer step of the timeline measurement (`overlap`, overlap.py, backend `cuda`).

`barrier` is a real measurement (the control plane's round trip). `spin` busy-waits a known time
on every rank (size_bytes x spin_ns_per_byte nanoseconds, stretched by `slow_pct`), so a test can
slow one op by an exact amount and check that `compare` finds it; its check counts spins that
ended early. `hang`, `crash` and `fail` make one rank misbehave so the watchdog and failure paths
can be seen working: a `hang` row must come back `timeout`, a `crash` row (the process exits) and
a `fail` row (one rank's set-up raises, the processes live on) `failed`, and the Cases after them must
still run.

Memory: no plan (memory_bytes is None): the mpi ops use no GPU, `overlap` two streams and 1-thread spin kernels.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ...comm.context import RankContext
from ...measure.state import CaseState
from ..base import Case, Family, Param, Traffic
from . import overlap

VICTIM_OPS = ("hang", "crash", "fail")   # the ops one rank (victim_rank) misbehaves in
GPU_OPS = ("overlap",)                   # on a GPU (backend cuda); the others on the control plane (mpi)

@dataclass
class HarnessState(CaseState):
    op: str
    world: object
    victim: int
    spin_ns: int = 0     # whole nanoseconds: the deadline and the check use the same integer clock
    early: int = 0       # spins that returned before their time (the spin's check)


class Harness(Family):
    name = "harness"
    summary = ("control-plane barrier latency, a known-length spin, deliberate hang/crash/fail Cases, "
               "the timeline's known-answer overlap step (self-checks)")
    ops = ("barrier", "spin", "hang", "crash", "fail", "overlap")
    backends = ("mpi", "cuda")
    dtypes = ("int32",)
    default_dtype = "int32"
    needs_gpu = False
    needs_torch = False
    params = {
        "victim_rank": Param(-1, (int,), "rank that hangs, crashes or fails (-1: the last rank)",
                             range=(-1, None), why_unbounded="a rank of the Case: checked against its ranks"),
        "spin_ns_per_byte": Param(1.0, (int, float), "spin: nanoseconds of busy-waiting per byte of size",
                                  range=(0, 1000)),
        "slow_pct": Param(0.0, (int, float), "spin: stretch every spin by this percent (a known "
                                               "slowdown for testing compare; 0 in real suites)",
                          range=(0, 1000)),
        "placement": Param("half", (str,), "overlap: where the communication stand-in runs against the "
                                           "compute (under, half under, after)", choices=overlap.PLACEMENTS),
        "spin_compute_us": Param(2000.0, (int, float), "overlap: the compute spin per step (us)",
                                 range=(10, 1_000_000)),
        "spin_comm_us": Param(1000.0, (int, float), "overlap: the communication stand-in per step (us)",
                              range=(10, 1_000_000)),
    }

    def needs_gpu_for(self, case: Case) -> bool:
        return case.op in GPU_OPS

    def impossible(self, case: Case) -> tuple[str, str] | None:
        if (case.op in GPU_OPS) != (case.backend == "cuda"):
            return ("backends", f"op {case.op} runs on backend {'cuda' if case.op in GPU_OPS else 'mpi'}")
        if case.op == "overlap":
            problem = overlap.placement_problem(case.param("placement", "half"), case.param("spin_compute_us", 2000.0),
                                                case.param("spin_comm_us", 1000.0))
            if problem:
                return ("params.spin_comm_us", problem)
        victim = case.param("victim_rank", -1)
        if case.op in VICTIM_OPS and victim >= case.ranks:
            return ("params.victim_rank", f"victim_rank ({victim}) is not one of the {case.ranks} rank(s)")
        return None

    def setup(self, case: Case, ctx: RankContext):
        if case.op == "overlap":
            return overlap.setup(case, ctx)
        victim = case.param("victim_rank", -1) % ctx.world.size
        if case.op == "fail" and ctx.world.rank == victim:
            raise RuntimeError("harness fail: this rank's set-up raised on purpose")
        spin_ns = round(case.size_bytes * float(case.param("spin_ns_per_byte", 1.0))
                        * (1.0 + float(case.param("slow_pct", 0.0)) / 100.0))
        return HarnessState(case.op, ctx.world, victim, spin_ns=spin_ns, count=1)

    def run(self, state: HarnessState) -> None:
        if state.op == "spin":
            # integer nanoseconds: with float seconds, a clock reading exactly at the deadline
            # could round to a hair below the spin time and count as early (a false `wrong`)
            start = time.perf_counter_ns()
            end = start + state.spin_ns
            now = start
            while now < end:
                now = time.perf_counter_ns()
            state.early += now - start < state.spin_ns
            return
        if state.op == "hang" and state.world.rank == state.victim:
            while True:
                time.sleep(1)
        if state.op == "crash" and state.world.rank == state.victim:
            os._exit(17)
        state.world.barrier()

    def check(self, state) -> int:
        if isinstance(state, overlap.OverlapState):
            return overlap.check(state)
        return state.early

    def traffic(self, case: Case, world_size: int) -> Traffic:
        return Traffic(0, 0.0)


FAMILY = Harness()
