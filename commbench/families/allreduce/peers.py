"""Peer-visible memory: one allocation per rank, mapped into every rank of the node.

Two providers give the same result (every rank's base pointer, valid in this
process): raw CUDA IPC handles exchanged over the MPI control plane
(``commbench.comm.ipc``), or torch symmetric memory (needs a torch.distributed group).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ...comm.ipc import PeerWorkspace
from ...errors import SkipCase

PROVIDERS = ("ipc", "torch_symm")


@dataclass
class PeerRegion:
    """``ptrs[r]`` is rank r's allocation as seen from this process; ``ptrs[rank]`` is our own."""

    ptrs: list[int]
    nbytes: int
    _close: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        while self._close:
            self._close.pop()()


def open_region(provider: str, nbytes: int, ctx, group_name: str | None = None) -> PeerRegion:
    """Allocate ``nbytes`` zeroed on every rank and map all ranks' allocations (collective)."""
    if provider == "ipc":
        return _open_ipc(nbytes, ctx)
    if provider == "torch_symm":
        if group_name is None:
            raise SkipCase("torch_symm peer memory needs a torch.distributed group")
        return _open_symm(nbytes, ctx, group_name)
    raise SkipCase(f"unknown peer memory provider {provider!r} (use one of {', '.join(PROVIDERS)})")


def _open_ipc(nbytes: int, ctx) -> PeerRegion:
    ws = PeerWorkspace(nbytes, ctx.world.comm, ctx.world.rank)
    return PeerRegion(ws.peers, nbytes, [ws.close])


def _open_symm(nbytes: int, ctx, group_name: str) -> PeerRegion:
    import torch
    import torch.distributed._symmetric_memory as symm_mem

    buf = symm_mem.empty(nbytes, dtype=torch.uint8, device=ctx.device)
    handle = symm_mem.rendezvous(buf, group_name)
    buf.zero_()
    torch.cuda.synchronize()
    ctx.world.comm.Barrier()
    region = PeerRegion([int(p) for p in handle.buffer_ptrs], nbytes)
    # Keep the tensor and handle alive as long as the region.
    region._close.append(lambda keep=(buf, handle): None)
    return region
