"""The device memory of a proxy Case on its GPU (ProxyFamily.memory_bytes).

On the GPU: the source window and, with executor ``device``, the destination window (each one
message; rate: one message per command, wrapping inside bench.WINDOW_CAP_BYTES); the producers'
counters and error words, the engine's ring heads (cudaMalloc) and, for latency, the kernel-clock
stamps; and, while the pattern is written or the destination compared, one chunk's temporaries
(bench.CHUNK_WORDS: the int64 index, or the compared chunk brought onto the GPU and its booleans).

Not on this GPU, so not counted: the command rings, tails and completion words (pinned host
memory), executor ``host``'s destination (pinned host memory) and executor ``peer``'s (on the next
GPU).
"""
from __future__ import annotations

from ...measure.memory import MemoryPlan, torch_alloc_bytes
from . import bench

RING_HEAD_BYTES = 8 * 8  # per proxy thread: kernels/proxy_ring.cuh kTailStride u64 words


def proxy_plan(case, prm: dict) -> MemoryPlan:
    producers = bench.producers(case.op, prm)
    _regions, window = bench.window(case.op, case.size_bytes, producers, prm["cmds_per_producer"])
    parts = {"source window": window}
    if prm["executor"] == "device":
        parts["destination window"] = window
    small = 2 * torch_alloc_bytes(4 * producers) + torch_alloc_bytes(8)   # posted, direct_done, error
    if case.backend == "proxy":
        small += RING_HEAD_BYTES * prm["proxy_threads"]
    if case.op == "latency":   # kernel-clock stamps of the timed launch and its calibration
        small += torch_alloc_bytes(8 * (case.warmup + case.iters)) + torch_alloc_bytes(16)
    parts["counters and stamps"] = small
    chunk = min(window, 4 * bench.CHUNK_WORDS)
    brought = chunk if prm["executor"] in ("host", "peer") else 0     # the destination's chunk, copied here
    transient = {"pattern chunk (int64 index)": 2 * chunk, "check chunk": brought + chunk}
    return MemoryPlan.of(parts, transient, note="pinned host memory (rings, executor host's destination) "
                                               "and executor peer's destination on the next GPU are not counted")

