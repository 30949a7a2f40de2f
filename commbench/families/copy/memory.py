"""The device memory of a copy Case (Copy.memory_bytes), on the busiest GPU it touches.

A pool is ``slots`` copies' worth of bytes (buffers.slot_stride x slot_count: the rotation through
``buffer_span_bytes``, at least one copy; one copy when the span is 0). Device pools, per GPU:

    h2d    GPU gpu: the destination pool                      (the source is host memory)
    d2h    GPU gpu: the source pool                           (the destination is host memory)
    d2d    GPU gpu: the source and the destination pool
    p2p    GPU gpu: the source pool; GPU peer: the destination pool (one pool on each)
    bidir  GPU gpu and GPU peer: each a source and a destination pool

Beside them, one chunk of the pattern at a time while a source is filled or a destination checked
(buffers.CHUNK_PEAK_BYTES_PER_ELEM per element of a chunk of at most buffers.CHUNK_ELEMS, on the
GPU of the pool: a host pool's pattern is made on GPU ``gpu``).

One process drives every GPU a Case touches, while the runner holds the plan against the free
memory of its own device (ctx.device) and measures the peak there only: the plan is the busiest
GPU's. Each GPU a Case touches holds the same (p2p and bidir load both GPUs alike), so the plan is
that device's exactly when it is ``gpu`` or ``peer``; when it is neither (another GPU's h2d, a pair
without it) it holds none of it, and the fit check is a conservative stand-in.

Not counted: pinned host memory (cudaHostAlloc'd and mapped: host memory, though a GPU reaches
it), pageable host memory and the driver's staging buffers, the CUDA contexts of the other GPUs,
peer mappings, bidir's stream and events, the copy kernel's module.
"""
from __future__ import annotations

from ...measure.memory import MemoryPlan
from . import buffers

# device pools on the busiest GPU, by op: (name, ...) of each
POOLS = {
    "h2d": ("destination pool",),
    "d2h": ("source pool",),
    "d2d": ("source pool", "destination pool"),
    "p2p": ("pool (source on gpu, destination on peer)",),
    "bidir": ("source pool", "destination pool"),
}
NOTE = ("the busiest GPU the copy touches; not counted: host memory (pinned mapped or pageable, and the "
        "driver's staging buffers), other GPUs' CUDA contexts, peer mappings, bidir's stream and events")


def pool_bytes(size_bytes: int, span_bytes: int) -> int:
    """The bytes of one pool: every slot the copies rotate through (Copy._build)."""
    stride = buffers.slot_stride(size_bytes)
    slots = buffers.slot_count(size_bytes, span_bytes)   # one slot without a span
    return stride * slots


def copy_plan(case, span_bytes: int) -> MemoryPlan:
    """The plan of ``case`` with pools rotating through ``span_bytes`` (0: one copy each)."""
    pool = pool_bytes(case.size_bytes, span_bytes)
    parts = {name: pool for name in POOLS[case.op]}
    chunk = min(pool // buffers.ELEMENT_BYTES, buffers.CHUNK_ELEMS)
    return MemoryPlan.of(parts, {"pattern chunk (fill, check)": chunk * buffers.CHUNK_PEAK_BYTES_PER_ELEM},
                         note=NOTE)
