"""Peer-visible device memory over CUDA IPC: one raw allocation per rank, opened by every peer.

The handshake runs over the MPI control plane (mpi4py allgather of the IPC handles); every step
that can fail on one rank alone is agreed on first, so a failure is an error on every rank, never
a hang. Ranks may share one GPU: IPC then maps the same device memory into each process, which
is what lets peer kernels be checked on a single GPU. The host helpers are kernels/ipc.cu.
"""
from __future__ import annotations

import ctypes

from .. import jit
from ..errors import CommbenchError
from .agree import agree, same_everywhere


class CudaError(CommbenchError):
    """A CUDA call made through the host helpers failed."""


def ipc_lib() -> ctypes.CDLL:
    lib = jit.load("ipc")
    lib.cb_ipc_error_string.restype = ctypes.c_char_p
    return lib


def check_cuda(code: int, what: str) -> None:
    if code:
        msg = ipc_lib().cb_ipc_error_string(code).decode()
        raise CudaError(f"{what} failed: {msg} (CUDA error {code})")


def copy_async(dst: int, src: int, nbytes: int, stream_handle: int) -> None:
    """Device copy between raw addresses (workspace or torch tensors) on a stream."""
    check_cuda(ipc_lib().cb_ipc_copy(ctypes.c_void_p(dst), ctypes.c_void_p(src),
                                     ctypes.c_size_t(nbytes), ctypes.c_void_p(stream_handle)),
               "cudaMemcpyAsync")


def zero(ptr: int, nbytes: int) -> None:
    """Zero ``nbytes`` at a raw device address and wait for it."""
    check_cuda(ipc_lib().cb_ipc_zero(ctypes.c_void_p(ptr), ctypes.c_size_t(nbytes)),
               f"cudaMemset({nbytes} bytes)")


class PeerWorkspace:
    """``nbytes`` of zeroed device memory on every rank (of the current device); ``peers[r]`` is
    rank r's base address here. Collective over ``comm`` (an mpi4py communicator)."""

    def __init__(self, nbytes: int, comm, rank: int):
        self.lib = ipc_lib()
        self.comm = comm
        self.rank = rank
        self.base = ctypes.c_void_p()

        def alloc():
            check_cuda(self.lib.cb_ipc_malloc(ctypes.byref(self.base), ctypes.c_size_t(nbytes)),
                       f"cudaMalloc({nbytes} bytes)")

        agree(comm, alloc, "the workspace allocation", undo=lambda _: self.lib.cb_ipc_free(self.base))
        handle = ctypes.create_string_buffer(self.lib.cb_ipc_handle_size())
        check_cuda(self.lib.cb_ipc_get(self.base, handle), "cudaIpcGetMemHandle")
        same_everywhere(comm, nbytes, "the workspace size")
        handles = comm.allgather(handle.raw)
        self.opened: list[ctypes.c_void_p] = []
        self.peers: list[int] = []
        for r, raw in enumerate(handles):
            if r == rank:
                self.peers.append(self.base.value)
                continue
            ptr = ctypes.c_void_p()
            check_cuda(self.lib.cb_ipc_open(ctypes.create_string_buffer(raw, len(raw)),
                                            ctypes.byref(ptr)), f"cudaIpcOpenMemHandle(rank {r})")
            self.opened.append(ptr)
            self.peers.append(ptr.value)

    def copy(self, dst: int, src: int, nbytes: int, stream_handle: int) -> None:
        copy_async(dst, src, nbytes, stream_handle)

    def close(self) -> None:
        """Unmap peers, then free our allocation once no peer can still touch it."""
        for ptr in self.opened:
            self.lib.cb_ipc_close(ptr)
        self.opened = []
        self.comm.Barrier()
        if self.base.value:
            self.lib.cb_ipc_free(self.base)
            self.base = ctypes.c_void_p()
