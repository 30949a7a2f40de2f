"""The expert step of one micro-batch on the GPU: pack what the dispatch delivered
(kernels/moe_expert_pack.cu), run the local experts' grouped GEMMs, unpack the
outputs to where the combine reads them. Enqueued on the current stream, with
no host sync on the grouped-GEMM path.

Backends describe their buffers with raw device addresses, so the pack reads
our IPC/NVSHMEM workspaces, NCCL receive buffers and DeepEP's tensors alike.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from ... import jit
from ...comm.ipc import check_cuda
from .workspace import MoeCudaError

_P = ctypes.c_void_p
_I = ctypes.c_int
_LL = ctypes.c_longlong


@dataclass(frozen=True)
class RowsIn:
    """Standard layout: n received rows, each with its top-k expert ids and weights."""

    x: int
    x_stride_bytes: int
    scales: int          # FP8: fp32 scales, scales_stride floats apart per row (else 0)
    scales_stride: int
    ids: int             # expert ids (int32 or int64); local expert = id - ids_base
    ids_stride: int      # elements between rows
    ids64: bool
    ids_base: int
    w: int               # fp32 weights, w_stride floats apart per row
    w_stride: int
    n: int


@dataclass(frozen=True)
class RowsOut:
    """Per received row, the weighted sum of its local experts' outputs goes to out."""

    out: int
    stride: int          # elements between rows
    f32: bool = False


@dataclass(frozen=True)
class SlotsIn:
    """Low-latency layout: segments of seg_rows slots, counts[j] valid rows in segment j."""

    x: int
    x_stride_bytes: int
    scales: int          # FP8 scale of (expert l, row r in the expert, block c) at
    s_expert: int        # scales + l * s_expert + r * s_row + c * s_col (floats)
    s_row: int
    s_col: int
    counts: int          # int32 [num_segs] on the device
    num_segs: int
    segs_per_expert: int
    seg_rows: int


@dataclass(frozen=True)
class SlotsOut:
    """Each expert output row goes back to its slot of y (BF16, stride elements apart)."""

    y: int
    stride: int


def _lib() -> ctypes.CDLL:
    lib = jit.load("moe_expert_pack")
    lib.moe_pack_rows.argtypes = [_P, _I, _I, _I, _P, _P, _P, _P, _P, _P, _P]
    lib.moe_unpack_rows.argtypes = [_P, _I, _P, _P, _P, _LL, _I, _P]
    lib.moe_pack_slots.argtypes = [_P, _I, _I, _I, _P, _P, _P, _P, _P, _P]
    lib.moe_unpack_slots.argtypes = [_I, _P, _I, _I, _P, _P, _P, _LL, _P]
    return lib


def _vp(t: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr())


class ExpertStep:
    """Pack -> grouped GEMM -> unpack for one micro-batch on this rank.

    ``cap`` is the (token, local expert) pairs this rank's experts receive in the
    micro-batch (known from the routing, so buffers are exact); the kernels flag
    ``err`` when a dispatch delivers more, or a count no dispatch can deliver.
    ``max_rows`` bounds n of the rows layout; ``num_segs`` is the slots layout's.
    """

    def __init__(self, experts, layout: str, cap: int, topk: int, fp8: bool, device,
                 max_rows: int = 0, num_segs: int = 0):
        if layout not in ("rows", "slots"):
            raise ValueError(f"unknown expert-side layout {layout!r}")
        self.lib = _lib()
        self.experts, self.layout, self.cap, self.topk, self.fp8 = experts, layout, cap, topk, fp8
        self.hidden, self.num_local = experts.hidden, experts.num_local
        dev = torch.device(device)
        self.xe = torch.empty(max(cap, 1), self.hidden, dtype=torch.bfloat16, device=dev)
        self.ends = torch.zeros(self.num_local, dtype=torch.int32, device=dev)
        self.counts = torch.zeros(self.num_local, dtype=torch.int32, device=dev)
        self.starts = torch.zeros(max(self.num_local, num_segs), dtype=torch.int32, device=dev)
        pairs = max_rows * topk if layout == "rows" else cap
        self.where = torch.full((max(pairs, 1),), -1, dtype=torch.int32, device=dev)
        self.err = torch.zeros(1, dtype=torch.int32, device=dev)
        self.max_rows = max_rows
        self._args_for: tuple = (None, None)

    def _args(self, src) -> ctypes.Array:
        if self._args_for[0] != src:   # backends with fixed buffers build this once
            if isinstance(src, RowsIn):
                vals = (src.x, src.x_stride_bytes, src.scales, src.scales_stride, src.ids,
                        src.ids_stride, int(src.ids64), src.ids_base, src.w, src.w_stride, src.n,
                        self.topk, self.num_local)
            else:
                vals = (src.x, src.x_stride_bytes, src.scales, src.s_expert, src.s_row, src.s_col,
                        src.counts, src.num_segs, src.segs_per_expert, src.seg_rows,
                        self.num_local)
            self._args_for = (src, (ctypes.c_longlong * len(vals))(*vals))
        return self._args_for[1]

    def run(self, src, dst) -> None:
        """Enqueue the whole step on the current stream."""
        stream = ctypes.c_void_p(torch.cuda.current_stream(self.xe.device).cuda_stream)
        args = self._args(src)
        if self.layout == "rows":
            if src.n > self.max_rows:
                raise MoeCudaError(f"{src.n} received rows exceed the {self.max_rows} planned")
            check_cuda(self.lib.moe_pack_rows(args, self.hidden, int(self.fp8), self.cap,
                                              _vp(self.counts), _vp(self.starts), _vp(self.ends),
                                              _vp(self.xe), _vp(self.where), _vp(self.err), stream),
                       "expert pack (rows)")
        else:
            check_cuda(self.lib.moe_pack_slots(args, self.hidden, int(self.fp8), self.cap,
                                               _vp(self.starts), _vp(self.ends), _vp(self.xe),
                                               _vp(self.where), _vp(self.err), stream),
                       "expert pack (slots)")
        ye = self.experts.forward(self.xe[:self.cap], self.ends) if self.cap else self.xe
        if self.layout == "rows":
            check_cuda(self.lib.moe_unpack_rows(args, self.hidden, _vp(self.where), _vp(ye),
                                                ctypes.c_void_p(dst.out), dst.stride, int(dst.f32),
                                                stream), "expert unpack (rows)")
        else:
            check_cuda(self.lib.moe_unpack_slots(self.hidden, _vp(self.ends), self.num_local,
                                                 self.cap, _vp(self.where), _vp(ye),
                                                 ctypes.c_void_p(dst.y), dst.stride, stream),
                       "expert unpack (slots)")

    def failed(self) -> bool:
        """A pack saw more pairs than planned or an impossible count (reads the device flag)."""
        return bool(int(self.err.item()))
