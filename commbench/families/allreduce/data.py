"""Verifiable all-reduce data: small integers whose sums are exact in fp32 and bf16.

Rank r holds ``(i % 7) + r + 1`` at element i (never zero). The sum over n
ranks is ``n * (i % 7) + n (n + 1) / 2``, at most 92 for 8 ranks: exact in
bf16 (8-bit mantissa) and fp32 whatever the summation order.

The pattern is written and checked in chunks of ``CHUNK_ELEMS`` elements, so the int64 index and
its arithmetic never take more than a few chunk-sized temporaries (``CHECK_BYTES_PER_ELEM``) whatever
the size: over the whole of an 8 GiB BF16 buffer they would need 32 GiB each (seen as an
out-of-memory error on an 80 GB H100, suites/allreduce-algos.yaml, 2026-12-07).
"""
from __future__ import annotations

from ...comm.buffers import chunk_ranges
from ...dtypes import BYTES as ELEMENT_BYTES
from ...dtypes import torch_dtype

__all__ = ["ELEMENT_BYTES", "PERIOD", "CHUNK_ELEMS", "CHECK_BYTES_PER_ELEM", "torch_dtype", "fill_input",
           "count_wrong", "view_bytes", "view"]

PERIOD = 7
CHUNK_ELEMS = 1 << 24
# bytes per element of a chunk alive at once while it is built or checked: three int64 temporaries
# (the index, its remainder, the scaled value), the chunk in the dtype (at most 4) and the booleans
CHECK_BYTES_PER_ELEM = 3 * 8 + 4 + 1


def _pattern(start: int, stop: int, scale: int, offset: int, dtype, device):
    """``(i % PERIOD) * scale + offset`` for i in [start, stop), as ``dtype``."""
    import torch

    idx = torch.arange(start, stop, device=device, dtype=torch.int64)
    return (idx % PERIOD * scale + offset).to(dtype)


def fill_input(tensor, rank: int) -> None:
    """Write rank ``rank``'s pattern into a 1-D tensor (in place, on its device), chunk by chunk."""
    for start, stop in chunk_ranges(tensor.numel(), CHUNK_ELEMS):
        tensor[start:stop].copy_(_pattern(start, stop, 1, rank + 1, tensor.dtype, tensor.device))


def count_wrong(output, world_size: int, dtype: str) -> int:
    """Elements of ``output`` (1-D, ``count`` long) that differ from the exact sum."""
    n, wrong = world_size, 0
    for start, stop in chunk_ranges(output.numel(), CHUNK_ELEMS):   # summed on the device, read once
        want = _pattern(start, stop, n, n * (n + 1) // 2, output.dtype, output.device)
        wrong = wrong + (output[start:stop] != want).sum()
    return int(wrong)


class _CudaBuffer:
    """Minimal __cuda_array_interface__ so torch can view memory it did not allocate."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (int(ptr), False), "version": 3, "strides": None,
        }


def view_bytes(ptr: int, nbytes: int, device):
    """A uint8 torch tensor over raw device memory (the owner keeps it alive)."""
    import torch

    return torch.as_tensor(_CudaBuffer(ptr, nbytes), device=device)


def view(ptr: int, count: int, dtype: str, device):
    """A 1-D tensor of ``count`` elements of ``dtype`` over raw device memory."""
    return view_bytes(ptr, count * ELEMENT_BYTES[dtype], device).view(torch_dtype(dtype))
