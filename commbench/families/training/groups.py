"""Process groups of a Case: the launch's torch.distributed world and its subgroups.

Subgroups are created once per launch (every rank calls new_group for every
group, in the same order, as torch.distributed requires) and cached.
"""
from __future__ import annotations

from ...comm.process_group import process_group


def world_group(ctx):
    return process_group(ctx)


def blocks(ctx, size: int):
    """This rank's group among consecutive blocks of `size` ranks ([0..size-1], [size..2size-1], ...)."""
    n = ctx.world.size
    return _mine(ctx, [list(range(g * size, (g + 1) * size)) for g in range(n // size)])


def strided(ctx, stride: int):
    """This rank's group among ranks equal modulo `stride` ({m, m+stride, m+2*stride, ...})."""
    n = ctx.world.size
    return _mine(ctx, [list(range(m, n, stride)) for m in range(stride)])


def _mine(ctx, layout: list[list[int]]):
    world = world_group(ctx)
    if len(layout) == 1:
        return world
    key = ("training.groups", tuple(map(tuple, layout)))
    if key not in ctx.cache:
        import torch.distributed as dist

        made = [dist.new_group(ranks) for ranks in layout]
        ctx.cache[key] = next(g for g, ranks in zip(made, layout) if ctx.world.rank in ranks)
    return ctx.cache[key]
