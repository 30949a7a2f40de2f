"""The low-latency workspace in NVSHMEM symmetric memory (backend nvshmem_ll).

One symmetric allocation per rank, the same address on every PE, taken from
the launch's NVSHMEM instance (``commbench/comm/nvshmem.py``) and reused
across Cases (grow only). It is zeroed at every Case's set-up, because the
count signals carry epochs that restart at 1 with every Case.
"""
from __future__ import annotations

from ...comm.agree import same_everywhere
from ...comm.ipc import copy_async, zero

BUFFER_NAME = "moe_ll_workspace"
KERNELS = "moe_ll_nvshmem"
ATTACH_SYMBOL = "moe_shmem_attach"


class SymmetricWorkspace:
    """Same interface as comm.ipc.PeerWorkspace: ``peers[r]`` is the address to use for rank r."""

    def __init__(self, handle, nbytes: int, comm, rank: int, ranks: int,
                 name: str = BUFFER_NAME):
        self.comm = comm
        same_everywhere(comm, nbytes, "the workspace size")
        self.base = handle.buffer(name, nbytes)   # collective; one buffer per name
        zero(self.base, nbytes)
        comm.Barrier()
        self.peers = [self.base] * ranks   # symmetric: one address names every PE's copy
        self.all_p2p = all(handle.is_p2p(self.base, pe) for pe in range(ranks) if pe != rank)

    def copy(self, dst: int, src: int, nbytes: int, stream_handle: int) -> None:
        copy_async(dst, src, nbytes, stream_handle)

    def close(self) -> None:
        """The buffer stays with the NVSHMEM handle (freed at finalize); wait for every peer."""
        self.comm.Barrier()
