"""A torch.distributed process group for symmetric memory, built over the MPI control plane.

Symmetric memory exchanges its handles through a torch.distributed store, so
the ranks need a group; gloo is enough because no data moves through it.
One group per launch, cached in ``ctx.cache``; reused when something else
already initialised torch.distributed.
"""
from __future__ import annotations

from .torch_ops import tcp_store

_KEY = "allreduce.torch_group"


def group_name(ctx) -> str:
    """Name of the WORLD group (created on first use in this launch)."""
    if _KEY in ctx.cache:
        return ctx.cache[_KEY]
    import torch.distributed as dist

    if not dist.is_initialized():
        world = ctx.world
        store = tcp_store(world)
        dist.init_process_group("gloo", store=store, rank=world.rank, world_size=world.size)
        ctx.on_close(dist.destroy_process_group)
    name = dist.group.WORLD.group_name
    import torch.distributed._symmetric_memory as symm_mem

    # Older torch releases require an explicit opt-in per group.
    if hasattr(symm_mem, "is_symm_mem_enabled_for_group") and not symm_mem.is_symm_mem_enabled_for_group(name):
        symm_mem.enable_symm_mem_for_group(name)
    ctx.cache[_KEY] = name
    return name
