"""Element types by the names suites use: bytes per element, the torch dtype, and up to where
every integer is exact (the verifiable-data checks rely on it). The one table of them.

Codes a library or kernel defines for a dtype (NCCL's ncclDataType_t, our kernels' ids) stay
beside the binding that passes them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str
    size_bytes: int
    torch_name: str   # attribute of the torch module
    exact_below: int  # every integer of magnitude below this is exact in the type


_ALL = (
    DType("float32", 4, "float32", 2**24),
    DType("float16", 2, "float16", 2**11),
    DType("bfloat16", 2, "bfloat16", 2**8),
    DType("float64", 8, "float64", 2**53),
    DType("float8_e4m3", 1, "float8_e4m3fn", 2**4),
    DType("float8_e5m2", 1, "float8_e5m2", 2**3),
    DType("int8", 1, "int8", 2**7),
    DType("uint8", 1, "uint8", 2**8),
    DType("int32", 4, "int32", 2**31),
    DType("uint32", 4, "uint32", 2**32),
    DType("int64", 8, "int64", 2**63),
    DType("uint64", 8, "int64", 2**63),   # torch has no uint64 arithmetic: the same bits as int64
)
DTYPES: dict[str, DType] = {d.name: d for d in _ALL}
BYTES: dict[str, int] = {d.name: d.size_bytes for d in _ALL}


def size_bytes(name: str) -> int:
    """Bytes per element of the dtype called ``name``."""
    return DTYPES[name].size_bytes


def torch_dtype(name: str):
    """The torch dtype for ``name`` (imports torch: call it only where torch is needed)."""
    import torch

    return getattr(torch, DTYPES[name].torch_name)
