"""A torch.distributed process group for symmetric memory, built over the MPI control plane.

Symmetric memory exchanges its handles through a torch.distributed store, so
the ranks need a group; gloo is enough because no data moves through it.
One group per launch, cached in ``ctx.cache``; reused when something else
already initialised torch.distributed.
"""
from __future__ import annotations

import socket

_KEY = "allreduce.torch_group"


def group_name(ctx) -> str:
    """Name of the WORLD group (created on first use in this launch)."""
    if _KEY in ctx.cache:
        return ctx.cache[_KEY]
    import torch.distributed as dist

    if not dist.is_initialized():
        world = ctx.world
        store = _make_store(world)
        dist.init_process_group("gloo", store=store, rank=world.rank, world_size=world.size)
        ctx.on_close(dist.destroy_process_group)
    name = dist.group.WORLD.group_name
    import torch.distributed._symmetric_memory as symm_mem

    # Older torch releases require an explicit opt-in per group.
    if hasattr(symm_mem, "is_symm_mem_enabled_for_group") and not symm_mem.is_symm_mem_enabled_for_group(name):
        symm_mem.enable_symm_mem_for_group(name)
    ctx.cache[_KEY] = name
    return name


def _make_store(world):
    from torch.distributed import TCPStore

    if world.rank == 0:
        # One node: loopback needs no name resolution. Several: rank 0's host name.
        host = "127.0.0.1" if world.num_nodes == 1 else socket.gethostname()
        store = TCPStore(host, 0, world.size, is_master=True, wait_for_workers=False)
        addr = (host, store.port)
    else:
        store, addr = None, None
    addr = world.comm.bcast(addr, root=0)
    if store is None:
        store = TCPStore(addr[0], addr[1], world.size, is_master=False)
    return store
