"""Timing modes (DESIGN section 5). Each returns this rank's per-iteration times in microseconds.

The runner aligns ranks with a barrier before each timed batch; inside a batch
ops are enqueued back to back, with no host sync, as nccl-tests does.
"""
from __future__ import annotations

import time
from typing import Callable

PIPELINED_REPEATS = 5   # samples of a pipelined Case (each one event pair around a batch); native_loop too
GRAPH_LAUNCHES = 5  # launches of the captured graph per sample, as nccl-tests -G 5; native_loop too


def _sync(stream) -> None:
    stream.synchronize()


def time_events(run: Callable[[], None], stream, iters: int, barrier: Callable[[], None]) -> list[float]:
    """An event between consecutive ops: one sample per op, no sync inside the batch."""
    import torch

    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    _sync(stream)
    barrier()
    with torch.cuda.stream(stream):
        events[0].record(stream)
        for i in range(iters):
            run()
            events[i + 1].record(stream)
    events[-1].synchronize()
    return [events[i].elapsed_time(events[i + 1]) * 1e3 for i in range(iters)]


def _repeated_batches(enqueue_batch: Callable[[], None], stream, iters: int,
                      barrier: Callable[[], None]) -> list[float]:
    """PIPELINED_REPEATS samples, each one event pair around a batch of ``iters`` ops / iters
    (``iters`` counts every op the batch enqueues)."""
    import torch

    out = []
    for _ in range(PIPELINED_REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _sync(stream)
        barrier()
        with torch.cuda.stream(stream):
            start.record(stream)
            enqueue_batch()
            end.record(stream)
        end.synchronize()
        out.append(start.elapsed_time(end) * 1e3 / iters)
    return out


def time_pipelined(run: Callable[[], None], stream, iters: int, barrier: Callable[[], None]) -> list[float]:
    """One event pair around ``iters`` ops (nccl-tests' default loop); sample = batch time / iters."""

    def batch():
        for _ in range(iters):
            run()
    return _repeated_batches(batch, stream, iters, barrier)


def time_graph(run: Callable[[], None], stream, iters: int, barrier: Callable[[], None]) -> list[float]:
    """Capture ``iters`` ops in one CUDA graph (no launch gaps); a sample is GRAPH_LAUNCHES replays
    / (GRAPH_LAUNCHES x iters), nccl-tests -G's definition."""
    import torch

    _sync(stream)
    graph = torch.cuda.CUDAGraph()
    capture = torch.cuda.Stream()  # capture must not use the legacy default stream
    capture.wait_stream(stream)
    with torch.cuda.graph(graph, stream=capture):
        for _ in range(iters):
            run()
    stream.wait_stream(capture)
    graph.replay()  # the first replay uploads the graph

    def launches():  # nccl-tests -G N: N back-to-back launches of the iters-op graph per sample
        for _ in range(GRAPH_LAUNCHES):
            graph.replay()
    out = _repeated_batches(launches, stream, iters * GRAPH_LAUNCHES, barrier)
    del graph
    return out


def time_host(run: Callable[[], None], iters: int, barrier: Callable[[], None]) -> list[float]:
    """Host clock around each (blocking) op; one barrier before the batch."""
    barrier()
    stamps = [time.perf_counter()]
    for _ in range(iters):
        run()
        stamps.append(time.perf_counter())
    return [(b - a) * 1e6 for a, b in zip(stamps, stamps[1:])]


TIMERS = {"events": time_events, "pipelined": time_pipelined, "graph": time_graph}


def mode_for(requested: str, on_stream: bool) -> str:
    """The timing mode a Case's ``timing`` runs as: `host` without a stream; on a stream, `auto`
    and `host` mean `events` (a GPU op's host time would be its enqueue time), the rest as asked."""
    if not on_stream:
        return "host"
    return "events" if requested in ("auto", "host") else requested
