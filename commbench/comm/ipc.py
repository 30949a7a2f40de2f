"""Peer workspaces over CUDA IPC: one raw allocation per rank, opened by every peer.

The handshake runs over the MPI control plane (mpi4py allgather of the IPC
handles). Ranks may share one GPU: IPC then maps the same device memory into
each process, which is what lets the kernels be checked on a single GPU.
"""
from __future__ import annotations

import ctypes

from ..errors import CommbenchError
from .. import jit

ALIGN_BYTES = 256

# Field order of moe::Layout in kernels/moe_common.cuh.
LAYOUT_FIELDS = (
    "cnt_in", "done_in", "ready_in", "expert_cnt_in", "recv_src", "recv_topk_idx",
    "recv_topk_w", "recv_x", "recv_scales", "y",
    "ll_cnt_in", "ll_recv_count", "ll_recv_src", "ll_recv_x", "ll_recv_scales", "ll_y",
    "ll_comb_buf", "ll_comb_cnt", "ll_send_x", "ll_send_scales",
)


class MoeCudaError(CommbenchError):
    """A CUDA call made by the MoE kernels' host helpers failed."""


def agree(comm, fn, what: str, undo=None):
    """Run ``fn`` on this rank; raise on every rank if it failed on any.

    Without this, a rank that failed alone would leave the others waiting in
    the next collective (allgather, barrier, nvshmem_malloc). ``undo(result)``
    releases what succeeded here when another rank failed.
    """
    try:
        out, err = fn(), None
    except Exception as exc:  # noqa: BLE001 - re-raised below, on every rank
        out, err = None, exc
    failed = [r for r, ok in enumerate(comm.allgather(err is None)) if not ok]
    if err is not None:
        raise err
    if failed:
        if undo is not None:
            undo(out)
        raise MoeCudaError(f"{what} failed on rank(s) {failed} (see the launch log)")
    return out


def copy_async(dst: int, src: int, nbytes: int, stream_handle: int) -> None:
    """Device copy between raw addresses (workspace or torch tensors) on a stream."""
    check_cuda(ipc_lib().moe_copy(ctypes.c_void_p(dst), ctypes.c_void_p(src),
                                  ctypes.c_size_t(nbytes), ctypes.c_void_p(stream_handle)),
               "cudaMemcpyAsync")


def same_size_everywhere(comm, nbytes: int) -> None:
    """Workspaces are laid out alike on every rank: refuse differing sizes (on every rank)."""
    sizes = comm.allgather(nbytes)
    if len(set(sizes)) != 1:
        raise MoeCudaError(f"ranks disagree on the workspace size: {sizes}")


def workspace_layout(sizes_bytes: dict[str, int]) -> tuple[dict[str, int], int]:
    """Offsets of every Layout field (aligned, absent fields get size 0) and the total size."""
    unknown = set(sizes_bytes) - set(LAYOUT_FIELDS)
    if unknown:
        raise ValueError(f"unknown workspace fields: {sorted(unknown)}")
    offsets, cursor = {}, 0
    for name in LAYOUT_FIELDS:
        offsets[name] = cursor
        cursor += -(-sizes_bytes.get(name, 0) // ALIGN_BYTES) * ALIGN_BYTES
    return offsets, max(cursor, ALIGN_BYTES)


def offsets_array(offsets: dict[str, int]):
    return (ctypes.c_longlong * len(LAYOUT_FIELDS))(*(offsets[f] for f in LAYOUT_FIELDS))


def ipc_lib() -> ctypes.CDLL:
    lib = jit.load("ipc")
    lib.moe_error_string.restype = ctypes.c_char_p
    return lib


def check_cuda(code: int, what: str) -> None:
    if code:
        msg = ipc_lib().moe_error_string(code).decode()
        raise MoeCudaError(f"{what} failed: {msg} (CUDA error {code})")


class PeerWorkspace:
    """``nbytes`` of device memory on every rank; ``peers[r]`` is rank r's base address here."""

    def __init__(self, nbytes: int, comm, rank: int):
        self.lib = ipc_lib()
        self.comm = comm
        self.rank = rank
        self.base = ctypes.c_void_p()

        def alloc():
            check_cuda(self.lib.moe_malloc(ctypes.byref(self.base), ctypes.c_size_t(nbytes)),
                       f"cudaMalloc({nbytes} bytes)")

        agree(comm, alloc, "the workspace allocation", undo=lambda _: self.lib.moe_free(self.base))
        handle = ctypes.create_string_buffer(self.lib.moe_ipc_handle_size())
        check_cuda(self.lib.moe_ipc_get(self.base, handle), "cudaIpcGetMemHandle")
        same_size_everywhere(comm, nbytes)
        handles = comm.allgather(handle.raw)
        self.opened: list[ctypes.c_void_p] = []
        self.peers: list[int] = []
        for r, raw in enumerate(handles):
            if r == rank:
                self.peers.append(self.base.value)
                continue
            ptr = ctypes.c_void_p()
            check_cuda(self.lib.moe_ipc_open(ctypes.create_string_buffer(raw, len(raw)),
                                             ctypes.byref(ptr)), f"cudaIpcOpenMemHandle(rank {r})")
            self.opened.append(ptr)
            self.peers.append(ptr.value)

    def copy(self, dst: int, src: int, nbytes: int, stream_handle: int) -> None:
        copy_async(dst, src, nbytes, stream_handle)

    def close(self) -> None:
        """Unmap peers, then free our allocation once no peer can still touch it."""
        for ptr in self.opened:
            self.lib.moe_ipc_close(ptr)
        self.opened = []
        self.comm.Barrier()
        if self.base.value:
            self.lib.moe_free(self.base)
            self.base = ctypes.c_void_p()
