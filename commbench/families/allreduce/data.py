"""Verifiable all-reduce data: small integers whose sums are exact in fp32 and bf16.

Rank r holds ``(i % 7) + r + 1`` at element i (never zero). The sum over n
ranks is ``n * (i % 7) + n (n + 1) / 2``, at most 92 for 8 ranks: exact in
bf16 (8-bit mantissa) and fp32 whatever the summation order.
"""
from __future__ import annotations

from ...dtypes import BYTES as ELEMENT_BYTES
from ...dtypes import torch_dtype

__all__ = ["ELEMENT_BYTES", "PERIOD", "torch_dtype", "fill_input", "expected", "count_wrong", "view_bytes",
           "view"]

PERIOD = 7


def fill_input(tensor, rank: int) -> None:
    """Write rank ``rank``'s pattern into a 1-D tensor (in place, on its device)."""
    import torch

    idx = torch.arange(tensor.numel(), device=tensor.device, dtype=torch.int64)
    tensor.copy_((idx % PERIOD + rank + 1).to(tensor.dtype))


def expected(count: int, world_size: int, dtype: str, device):
    import torch

    idx = torch.arange(count, device=device, dtype=torch.int64)
    n = world_size
    return (idx % PERIOD * n + n * (n + 1) // 2).to(torch_dtype(dtype))


def count_wrong(output, world_size: int, dtype: str) -> int:
    """Elements of ``output`` (1-D, ``count`` long) that differ from the exact sum."""
    want = expected(output.numel(), world_size, dtype, output.device)
    return int((output != want).sum().item())


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
