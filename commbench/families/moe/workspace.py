"""The layout of the MoE kernels' peer workspace (moe::Layout) and the MoE host code's error.

The workspace itself is ``commbench.comm.ipc.PeerWorkspace`` (CUDA IPC) or, for nvshmem_ll,
``shmem.SymmetricWorkspace``.
"""
from __future__ import annotations

import ctypes

from ...comm.ipc import CudaError

ALIGN_BYTES = 256

# Field order of moe::Layout in kernels/moe_common.cuh.
LAYOUT_FIELDS = (
    "cnt_in", "done_in", "ready_in", "expert_cnt_in", "recv_src", "recv_topk_idx",
    "recv_topk_w", "recv_x", "recv_scales", "y",
    "ll_cnt_in", "ll_recv_count", "ll_recv_src", "ll_recv_x", "ll_recv_scales", "ll_y",
    "ll_comb_buf", "ll_comb_cnt", "ll_send_x", "ll_send_scales", "ll_comb_flag",
)


class MoeCudaError(CudaError):
    """The MoE kernels reported a failure (a cross-rank wait timed out, more rows than planned)."""


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
