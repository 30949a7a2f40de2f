"""The copy family's buffers: pools on a GPU, in pinned mapped host memory or in pageable host
memory, the verifiable pattern they hold and the check of a copied slot.

A pool holds ``slots`` copies' worth of bytes (the op rotates through them, kernels/copy.cu).
The pattern is element i (int32) = i XOR a mask with bit 31 set: never zero, different in every
element, so a lost, shifted or repeated 16-byte vector shows up; the two directions of a bidir
copy use different masks. (The index is taken modulo 2**32: beyond 16 GiB the pattern repeats.)

The pattern is written and checked in chunks of ``CHUNK_ELEMS`` elements, so its temporaries (an
int64 index and the int32 pattern it becomes: ``CHUNK_PEAK_BYTES_PER_ELEM`` bytes per element of a
chunk) stay the same whatever the size (memory.py). Over the whole pool, filling it took as much
device memory again as the pool, and checking a slot up to 2.25 times a copy's size (a host slot
staged on the GPU, the pattern, the comparison's booleans).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ...comm.buffers import chunk_ranges
from . import native

ELEMENT_BYTES = 4
SLOT_ALIGN_BYTES = 256   # a slot starts 16-byte aligned (the SM kernel's vectors) and on a sector
MASKS = (-0x25A5A5A6, -0x5A3C3C3D)   # 0xDA5A5A5A, 0xA5C3C3C3 as int32: bit 31 set
PLACES = ("device", "pinned", "pageable")


def slot_stride(size_bytes: int) -> int:
    return -(-size_bytes // SLOT_ALIGN_BYTES) * SLOT_ALIGN_BYTES


def slot_count(size_bytes: int, span_bytes: int) -> int:
    """Slots a pool rotates through: as many whole copies as fit in ``span_bytes`` (at least 1; span 0:
    one)."""
    return max(1, span_bytes // slot_stride(size_bytes))


CHUNK_ELEMS = 1 << 24   # 64 MiB of int32 per chunk
# device bytes per chunk element at the peak of a fill or check: the int64 index and the int32
# pattern made from it (the check compares after the index is gone: the pattern, a host chunk
# staged on the GPU and the comparison's booleans are 9 bytes)
CHUNK_PEAK_BYTES_PER_ELEM = 8 + 4


def pattern(count: int, seed: int, device: Any, start: int = 0):
    """The int32 pattern of elements [start, start + count) on ``device``."""
    import torch

    idx = torch.arange(start, start + count, dtype=torch.int64, device=device)
    return idx.bitwise_xor_(MASKS[seed]).to(torch.int32)   # the low 32 bits: i XOR mask as int32


def count_wrong(got, seed: int, device: Any = None) -> int:
    """Elements of ``got`` (int32, 1-D, any device) that differ from the pattern, chunk by chunk on
    ``device`` (default: where ``got`` is; a host buffer's chunks are copied to it)."""
    device = got.device if device is None else device
    wrong = 0
    for start, stop in chunk_ranges(got.numel(), CHUNK_ELEMS):
        want = pattern(stop - start, seed, device, start)   # first: its index is gone before the staging
        wrong = wrong + (got[start:stop].to(want.device) != want).sum()   # summed there, read once
    return int(wrong)


@dataclass
class Pool:
    """``nbytes`` on a GPU ("device", ``gpu``), in pinned mapped host memory or in pageable host
    memory. ``ptr`` is the address copies use (a device address for pinned memory), ``view`` an
    int32 tensor over the whole pool."""

    place: str
    gpu: int
    nbytes: int
    ptr: int = 0
    view: Any = None
    _host: int = 0
    _keep: list = field(default_factory=list)

    @classmethod
    def make(cls, place: str, gpu: int, nbytes: int) -> "Pool":
        import ctypes

        import torch

        pool = cls(place, gpu, nbytes)
        count = nbytes // ELEMENT_BYTES
        if place == "device":
            pool.view = torch.empty(count, dtype=torch.int32, device=f"cuda:{gpu}")
            pool.ptr = pool.view.data_ptr()
        elif place == "pinned":
            pool._host, pool.ptr = native.host_alloc(nbytes)
            raw = (ctypes.c_byte * nbytes).from_address(pool._host)
            pool._keep.append(raw)
            pool.view = torch.frombuffer(raw, dtype=torch.int32, count=count)
        elif place == "pageable":
            pool.view = torch.empty(count, dtype=torch.int32)
            pool.ptr = pool.view.data_ptr()
        else:
            raise ValueError(place)
        return pool

    def fill(self, seed: int) -> None:
        """The pattern over the whole pool, chunk by chunk (made on the pool's GPU, then copied here)."""
        for start, stop in chunk_ranges(self.view.numel(), CHUNK_ELEMS):
            self.view[start:stop].copy_(pattern(stop - start, seed, f"cuda:{self.gpu}", start))

    def clear(self, count: int) -> None:
        self.view[:count].zero_()

    def wrong(self, count: int, seed: int) -> int:
        """Elements of the first slot (``count`` int32) that differ from the pattern, compared on the
        pool's GPU (a host pool's chunks are copied there)."""
        return count_wrong(self.view[:count], seed, f"cuda:{self.gpu}")

    def release(self) -> None:
        self.view = None          # no tensor may outlive the memory under it
        self._keep.clear()
        if self._host:
            host, self._host = self._host, 0
            native.host_free(host)


@dataclass
class Direction:
    """One way of a copy: from ``src`` to ``dst``, its pattern ``seed``."""

    src: Pool
    dst: Pool
    seed: int

    def wrong(self, count: int) -> int:
        return self.dst.wrong(count, self.seed)


def release_all(pools: list[Pool], sync: Callable[[], None]) -> None:
    sync()
    for p in pools:
        p.release()
