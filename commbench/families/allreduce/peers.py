"""Peer-visible memory: one allocation per rank, mapped into every rank of the node.

Two providers give the same result (every rank's base pointer, valid in this
process): raw CUDA IPC handles exchanged over the MPI control plane (needs
cupy), or torch symmetric memory (needs a torch.distributed group).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

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


def _ordinal(ctx) -> int:
    return int(str(ctx.device).split(":")[1]) if ":" in str(ctx.device) else 0


def _open_ipc(nbytes: int, ctx) -> PeerRegion:
    try:
        import cupy
    except ImportError as exc:
        raise SkipCase(f"CUDA IPC peer memory needs cupy ({exc})") from exc
    rt = cupy.cuda.runtime
    world = ctx.world
    with cupy.cuda.Device(_ordinal(ctx)):
        own = rt.malloc(nbytes)
        rt.memset(own, 0, nbytes)
        rt.deviceSynchronize()
        handle = bytes(rt.ipcGetMemHandle(own))
    handles = world.comm.allgather(handle)
    ptrs: list[int] = []
    region = PeerRegion(ptrs, nbytes)

    def free_own() -> None:
        with cupy.cuda.Device(_ordinal(ctx)):
            rt.free(own)

    region._close.append(free_own)
    with cupy.cuda.Device(_ordinal(ctx)):
        for r, h in enumerate(handles):
            if r == world.rank:
                ptrs.append(own)
                continue
            peer = rt.ipcOpenMemHandle(h)  # lazy peer access enabled by default
            ptrs.append(peer)
            region._close.append(lambda p=peer: rt.ipcCloseMemHandle(p))
    # Nobody may free its memory while a peer still maps it: close behind a barrier.
    region._close.append(world.comm.Barrier)
    return region


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
