"""Torch views of NVSHMEM symmetric memory and the verifiable data put into it.

Patterns are written and checked in chunks of ``CHUNK_ELEMS`` elements, so the int64 index and
the arithmetic on it stay chunk-sized whatever the buffer (over a whole 256 MiB bfloat16 buffer
the point-to-point pattern alone took 24 bytes per element, 3 GiB; memory.py counts the chunks).
Everything here takes torch tensors on any device (the unit tests use CPU tensors).
"""
from __future__ import annotations

from ...comm.buffers import chunk_ranges
from ...dtypes import torch_dtype

# Largest value whose every integer below is exact in the dtype: P2P patterns stay below it.
_P2P_MODULUS = {"float32": 65521, "int32": 65521, "bfloat16": 251, "float16": 2039, "uint64": 65521}
CHUNK_ELEMS = 1 << 22
# Bytes per element alive at once while a point-to-point chunk is written or checked: the int64
# index (the pattern's arithmetic runs in place on it), its cast to the dtype (at most 8 bytes)
# and the comparison's booleans.
P2P_PEAK_PER_ELEM = 8 + 8 + 1
# A collective's chunk: the int64 index and the pattern's arithmetic on it (written in place to
# the symmetric source), then for the check comm.buffers.mismatches in float64 (the result, the
# expected values, |difference|, |expected| and the tolerance times it) beside the int64 expected
# values; eight 8-byte arrays bound both.
COLL_PEAK_PER_ELEM = 8 * 8


class _CudaArray:
    """Minimal __cuda_array_interface__ so torch can wrap a raw device pointer (no copy)."""

    def __init__(self, ptr: int, size_bytes: int):
        self.__cuda_array_interface__ = {"shape": (size_bytes,), "typestr": "|u1",
                                         "data": (int(ptr), False), "version": 3, "strides": None}


def view(ptr: int, size_bytes: int, dtype: str, device: str):
    """A torch tensor of ``dtype`` over ``size_bytes`` at ``ptr`` (memory owned by NVSHMEM)."""
    import torch

    raw = torch.as_tensor(_CudaArray(ptr, size_bytes), device=device)
    return raw.view(torch_dtype(dtype))


def index(start: int, stop: int, device):
    """int64 positions start..stop-1 on ``device``."""
    import torch

    return torch.arange(start, stop, device=device, dtype=torch.int64)


def p2p_chunk(pe: int, start: int, stop: int, dtype: str, device):
    """PE ``pe``'s values at positions [start, stop): non-zero, exact, position-dependent (a
    shifted copy never matches), as ``dtype``."""
    vals = index(start, stop, device).mul_(40503).add_(pe * 97).remainder_(_P2P_MODULUS[dtype]).add_(1)
    return vals.to(torch_dtype(dtype))


def counter_chunk(start: int, stop: int, device, added: int = 0):
    """Atomic counters at positions [start, stop): they start at 1..n and grew by ``added``."""
    return index(start + 1 + added, stop + 1 + added, device)


def fill(tensor, values) -> None:
    """Write ``values(start, stop)`` (a chunk of the pattern) into 1-D ``tensor``, chunk by chunk."""
    for start, stop in chunk_ranges(tensor.numel(), CHUNK_ELEMS):
        tensor[start:stop].copy_(values(start, stop))


def count_exact(got, values) -> int:
    """Elements of 1-D ``got`` that differ from ``values(start, stop)`` (exact comparison); summed
    on the device, read once."""
    wrong = 0
    for start, stop in chunk_ranges(got.numel(), CHUNK_ELEMS):
        wrong = wrong + (got[start:stop] != values(start, stop)).sum()
    return int(wrong)


def count_within(got, values, dtype: str) -> int:
    """Elements of 1-D ``got`` beyond ``dtype``'s tolerance of ``values(start, stop)``
    (comm.buffers.mismatches, as the collectives family checks NCCL's results)."""
    from ...comm.buffers import mismatches

    return sum(mismatches(got[start:stop], values(start, stop), dtype)
               for start, stop in chunk_ranges(got.numel(), CHUNK_ELEMS))
