"""The launch's one torch.distributed process group, built over the MPI control plane.

Its store is a TCPStore that rank 0 serves on a port the OS picks; the address goes out over
MPI. The group is created on first use in a launch, cached in ``ctx.cache`` and destroyed when
the launch ends; a later caller shares the group that exists (also one something else made).
The first caller decides the backends: callers that move data through it get
"cpu:gloo,cuda:nccl" (tensors choose their backend), torch symmetric memory, which exchanges
only handles through it, gets gloo.
"""
from __future__ import annotations

import socket

from .. import safety
from .context import RankContext

_KEY = "torch_pg"
_SYMM_KEY = "torch_pg.symm_name"


def tcp_store(world):
    """A torch TCPStore served by rank 0 on a port the OS picks (no port race), address sent over MPI."""
    from torch.distributed import TCPStore

    if world.rank == 0:
        # one node: loopback needs no name resolution; several: rank 0's host name
        host = "127.0.0.1" if world.num_nodes == 1 else socket.gethostname()
        store = TCPStore(host, 0, world.size, is_master=True, wait_for_workers=False)
        addr = (host, store.port)
    else:
        store, addr = None, None
    addr = world.bcast(addr)
    if store is None:
        store = TCPStore(addr[0], addr[1], world.size, is_master=False)
    return store


def process_group(ctx: RankContext, moves_data: bool = True):
    """The launch's default process group (WORLD), created on first use."""
    import torch
    import torch.distributed as dist

    if _KEY in ctx.cache:
        return ctx.cache[_KEY]
    if dist.is_initialized():  # something else of this launch made the default group: share it
        ctx.cache[_KEY] = dist.group.WORLD
        return ctx.cache[_KEY]
    world = ctx.world
    backend, kwargs = "gloo", {}
    if moves_data and torch.cuda.is_available():
        backend = "cpu:gloo,cuda:nccl"
        if ctx.device.startswith("cuda") and world.local_size <= torch.cuda.device_count():
            # eager NCCL set-up; skipped when ranks share a GPU (NCCL refuses that, gloo still works)
            kwargs["device_id"] = torch.device(ctx.device)
    safety.before_communicator(f"torch process group ({backend})")   # NCCL and symmetric memory read them
    dist.init_process_group(backend=backend, store=tcp_store(world), rank=world.rank,
                            world_size=world.size, **kwargs)
    ctx.cache[_KEY] = dist.group.WORLD
    ctx.on_close(dist.destroy_process_group)
    return ctx.cache[_KEY]


def symm_group_name(ctx: RankContext) -> str:
    """Name of the WORLD group, enabled for torch symmetric memory (which rendezvous through it)."""
    if _SYMM_KEY in ctx.cache:
        return ctx.cache[_SYMM_KEY]
    name = process_group(ctx, moves_data=False).group_name
    import torch.distributed._symmetric_memory as symm_mem

    # Older torch releases require an explicit opt-in per group.
    if hasattr(symm_mem, "is_symm_mem_enabled_for_group") and not symm_mem.is_symm_mem_enabled_for_group(name):
        symm_mem.enable_symm_mem_for_group(name)
    ctx.cache[_SYMM_KEY] = name
    return name
