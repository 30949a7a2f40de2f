"""A rank outside `commbench run`'s launches (a GPU test driver, a notebook, a user's script),
prepared exactly as a launch prepares one, so the runner measures it under the same rules:

- the multicast kill switches are set and the launch's record of them (COMMBENCH_KILL_SWITCHES)
  is written, so the runner's tamper check has something to hold the rank to (a standalone rank
  never opts in to multicast);
- the GPU is bound as in a launch (local_rank mod GPUs), and ranks that share a GPU get their own
  NCCL host identity before any communicator exists;
- the rank clocks are aligned over MPI, so multi-rank Cases get their skew columns.
"""
from __future__ import annotations

import json
import os

from ..comm.context import RankContext
from .. import safety
from . import device


def open_rank(needs_gpu: bool = True, world=None) -> RankContext:
    """This process as a rank of a launch (a collective over the MPI job when ``world`` is None)."""
    os.environ.update(safety.KILL_SWITCHES)
    os.environ[safety.EXPECTED_VAR] = json.dumps(safety.active_kill_switches(), sort_keys=True)
    problem = safety.c_switch_problem(safety.expected_switches())   # what NCCL/NVSHMEM will read
    if problem:
        raise safety.SwitchesNotHeld(problem)
    if world is None:
        from ..world import build_world

        world = build_world()
    binding = device.bind(world, needs_gpu)
    ctx = RankContext(world=world, device=binding.device, ranks_per_gpu=binding.ranks_per_gpu)
    from ..profile.hooks import PROFILE_KEY, LaunchProfiling

    ctx.cache[PROFILE_KEY] = LaunchProfiling(world, None)   # rank clocks aligned, as in a launch
    return ctx


def close_rank(ctx: RankContext) -> None:
    """Release what the launch's Cases left in ctx (communicators, process groups), newest first."""
    while ctx.closers:
        ctx.closers.pop()()
