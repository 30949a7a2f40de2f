"""Harness self-checks: MPI barrier latency, and deliberate hang/crash Cases.

`barrier` is a real measurement (the control plane's round trip). `hang` and
`crash` make one rank misbehave so the watchdog and failure paths can be seen
working: a `hang` row must come back `timeout`, a `crash` row `failed`, and the
Cases after them must still run.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..base import Case, Family, Param, RankContext, Traffic
from ...measure.state import CaseState


@dataclass
class HarnessState(CaseState):
    op: str
    world: object
    victim: int


class Harness(Family):
    name = "harness"
    summary = "control-plane barrier latency and deliberate hang/crash Cases (watchdog self-check)"
    ops = ("barrier", "hang", "crash")
    backends = ("mpi",)
    dtypes = ("int32",)
    default_dtype = "int32"
    needs_gpu = False
    needs_torch = False
    params = {"victim_rank": Param(-1, (int,), "rank that hangs or crashes (-1: the last rank)")}

    def setup(self, case: Case, ctx: RankContext) -> HarnessState:
        victim = case.param("victim_rank", -1) % ctx.world.size
        return HarnessState(case.op, ctx.world, victim, count=1)

    def run(self, state: HarnessState) -> None:
        if state.op == "hang" and state.world.rank == state.victim:
            while True:
                time.sleep(1)
        if state.op == "crash" and state.world.rank == state.victim:
            os._exit(17)
        state.world.barrier()

    def check(self, state: HarnessState) -> int:
        return 0

    def traffic(self, case: Case, world_size: int) -> Traffic:
        return Traffic(0, 0.0)


FAMILY = Harness()
