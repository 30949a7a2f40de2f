"""Torch views of NVSHMEM symmetric memory and the verifiable data put into it."""
from __future__ import annotations

TORCH_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16",
                "int32": "int32", "uint64": "int64"}
ELEM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int32": 4, "uint64": 8}
# Largest value whose every integer below is exact in the dtype: P2P patterns stay below it.
_P2P_MODULUS = {"float32": 65521, "int32": 65521, "bfloat16": 251, "float16": 2039, "uint64": 65521}


class _CudaArray:
    """Minimal __cuda_array_interface__ so torch can wrap a raw device pointer (no copy)."""

    def __init__(self, ptr: int, size_bytes: int):
        self.__cuda_array_interface__ = {"shape": (size_bytes,), "typestr": "|u1",
                                         "data": (int(ptr), False), "version": 3, "strides": None}


def view(ptr: int, size_bytes: int, dtype: str, device: str):
    """A torch tensor of ``dtype`` over ``size_bytes`` at ``ptr`` (memory owned by NVSHMEM)."""
    import torch

    raw = torch.as_tensor(_CudaArray(ptr, size_bytes), device=device)
    return raw.view(getattr(torch, TORCH_DTYPES[dtype]))


def p2p_values(pe: int, count: int, dtype: str, device: str):
    """Non-zero, exact, position-dependent values for PE ``pe`` (a shifted copy never matches)."""
    import torch

    idx = torch.arange(count, device=device, dtype=torch.int64)
    vals = (idx * 40503 + pe * 97) % _P2P_MODULUS[dtype] + 1
    return vals.to(getattr(torch, TORCH_DTYPES[dtype]))


def count_mismatch(got, expected) -> int:
    """Elements of ``got`` that differ from ``expected`` (exact comparison)."""
    return int((got != expected).sum().item())
