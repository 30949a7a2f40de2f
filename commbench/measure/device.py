"""Which GPU a rank binds, how many ranks share it, and NCCL's host identity when they do.

A launch may put more ranks on a host than it has GPUs (a rehearsal of an 8-rank suite on one
GPU). CUDA IPC, NVSHMEM (limited MPG) and torch symmetric memory work there as they are; NCCL
refuses two ranks of one host on one GPU ("Duplicate GPU detected") unless each rank claims a
host of its own. So when ranks share a GPU, every rank gets its own ``NCCL_HOSTID`` before any
communicator exists: NCCL then sees one rank per node and connects the ranks over its network
transport (NET/Socket on loopback), running its inter-node algorithms and proxy thread. That
proves correctness and code paths; the times are the GPU time-sliced between processes, never
speed (docs/rehearsal.md), and every row says so in ``ranks_per_gpu``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

HOSTID_VAR = "NCCL_HOSTID"
_SITE_HOSTID: dict[str, str] = {}   # identity this process gave NCCL -> the base it was made from


@dataclass(frozen=True)
class Binding:
    """A rank's device and what it shares. ``ranks_per_gpu`` is the most ranks bound to one GPU
    anywhere in the launch (None without a GPU); ``nccl_hostid`` the identity commbench gave NCCL
    (None when the ranks do not share)."""

    device: str
    ranks_per_gpu: int | None = None
    nccl_hostid: str | None = None

    @property
    def shared(self) -> bool:
        return bool(self.ranks_per_gpu and self.ranks_per_gpu > 1)


def ranks_on_my_gpu(local_rank: int, local_size: int, gpus: int) -> int:
    """Ranks of this host bound to the same GPU as ``local_rank`` (binding: local_rank mod GPUs)."""
    return len(range(local_rank % gpus, local_size, gpus))


def shared_hostid(base: str, rank: int) -> str:
    """The host identity of one rank among ranks that share a GPU: distinct per rank, and
    readable in NCCL's logs (``<host>-r<rank>``; a site's own NCCL_HOSTID is kept as the base)."""
    return f"{base}-r{rank}"


def bind(world, needs_gpu: bool) -> Binding:
    """Bind this rank to local GPU (local_rank mod GPUs) when a Case needs one. A collective:
    every rank of the launch calls it, so each learns the most ranks any GPU carries."""
    device, mine = "cpu", None
    if needs_gpu:
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None and torch.cuda.is_available():
            gpus = torch.cuda.device_count()
            idx = world.local_rank % gpus
            torch.cuda.set_device(idx)
            device, mine = f"cuda:{idx}", ranks_on_my_gpu(world.local_rank, world.local_size, gpus)
    counts = [c for c in world.allgather(mine) if c is not None]
    most = max(counts) if counts else None
    hostid = None
    if most is not None and most > 1 and device != "cpu":
        # before any NCCL communicator of this process: NCCL reads it when a communicator is made
        current = os.environ.get(HOSTID_VAR)
        base = _SITE_HOSTID.get(current, current) or world.hostname   # a second bind keeps the base
        hostid = shared_hostid(base, world.rank)
        os.environ[HOSTID_VAR] = hostid
        _SITE_HOSTID[hostid] = base
    return Binding(device=device, ranks_per_gpu=most, nccl_hostid=hostid)


def sharing_record(world, binding: Binding) -> dict:
    """For run.json (a collective; meaningful on rank 0): how the ranks shared GPUs and the NCCL
    host identity each rank was given."""
    ids = world.allgather(binding.nccl_hostid)
    devices = world.allgather(binding.device)
    return {"ranks_per_gpu": binding.ranks_per_gpu,
            "devices": {str(r): d for r, d in enumerate(devices)},
            "nccl_hostid": {str(r): h for r, h in enumerate(ids) if h is not None}}


def nccl_identity_clash(world, device: str) -> str | None:
    """Why NCCL cannot put these ranks on their GPUs (a collective; None when it can): two ranks
    on one GPU of one host with one NCCL host identity (a site set NCCL_HOSTID after bind)."""
    places = world.allgather((world.hostname, device, os.environ.get(HOSTID_VAR)))
    if len(set(places)) == len(places):
        return None
    return (f"ranks share a GPU with the same {HOSTID_VAR}: NCCL refuses that (Duplicate GPU detected); "
            f"leave {HOSTID_VAR} to commbench, which gives each sharing rank its own")
