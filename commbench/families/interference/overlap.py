"""Timing a GEMM and a collective alone and together, per iteration (GPU streams or CPU threads).

GPU: the GEMM goes on one stream, the collective on another. Both wait behind a short
GPU-side sleep on the first stream, recorded before either is enqueued, so they start
at the same GPU time whatever the host's enqueue order costs; each stream's end event
gives that op's time from the common start. Alone phases use the same gate.
CPU (gloo): the collective runs in a worker thread (gloo and torch's matmul release the
GIL), the GEMM in the calling thread, both released at once.
Every iteration starts after an MPI barrier, in every phase alike.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

PHASES = ("gemm", "comm", "together")
GATE_CYCLES = 200_000   # ~0.1 ms of GPU sleep: time to enqueue both ops before either starts


@dataclass
class Sample:
    wall_us: float
    gemm_us: float | None
    comm_us: float | None


class GpuPair:
    def __init__(self, gemm: Callable[[], None], comm: Callable[[], None]):
        import torch

        self.gemm, self.comm = gemm, comm
        self.gemm_stream, self.comm_stream = torch.cuda.Stream(), torch.cuda.Stream()

    def once(self, phase: str, barrier: Callable[[], None]) -> Sample:
        import torch

        ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
        start, g_end, c_end = ev(), ev(), ev()
        torch.cuda.synchronize()
        barrier()
        with torch.cuda.stream(self.gemm_stream):
            torch.cuda._sleep(GATE_CYCLES)
            start.record(self.gemm_stream)
        self.comm_stream.wait_event(start)
        if phase in ("gemm", "together"):
            with torch.cuda.stream(self.gemm_stream):
                self.gemm()
                g_end.record(self.gemm_stream)
        if phase in ("comm", "together"):
            with torch.cuda.stream(self.comm_stream):
                self.comm()
                c_end.record(self.comm_stream)
        torch.cuda.synchronize()
        g = start.elapsed_time(g_end) * 1e3 if phase != "comm" else None
        c = start.elapsed_time(c_end) * 1e3 if phase != "gemm" else None
        return Sample(max(x for x in (g, c) if x is not None), g, c)

    def close(self) -> None:
        pass


class CpuPair:
    """The collective in a worker thread, released together with the GEMM in the caller."""

    def __init__(self, gemm: Callable[[], None], comm: Callable[[], None]):
        self.gemm, self.comm = gemm, comm
        self._go, self._done = threading.Event(), threading.Event()
        self._stop = False
        self._span: tuple[int, int] = (0, 0)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="interference-comm", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            self._go.wait()
            self._go.clear()
            if self._stop:
                return
            try:
                t0 = time.perf_counter_ns()
                self.comm()
                self._span = (t0, time.perf_counter_ns())
            except BaseException as exc:  # noqa: BLE001 - re-raised in the measuring thread
                self._error = exc
            self._done.set()

    def once(self, phase: str, barrier: Callable[[], None]) -> Sample:
        barrier()
        t0 = time.perf_counter_ns()
        if phase != "gemm":
            self._done.clear()
            self._go.set()
        g = None
        if phase != "comm":
            self.gemm()
            g = (time.perf_counter_ns() - t0) / 1e3
        c = None
        if phase != "gemm":
            self._done.wait()
            if self._error is not None:
                raise self._error
            c = (self._span[1] - t0) / 1e3
        return Sample(max(x for x in (g, c) if x is not None), g, c)

    def close(self) -> None:
        self._stop = True
        self._go.set()
        self._thread.join(timeout=10)


def measure(pair, warmup: int, iters: int, barrier: Callable[[], None]) -> dict[str, list[Sample]]:
    """Per phase: ``warmup`` untimed then ``iters`` timed iterations."""
    out = {}
    for phase in PHASES:
        for _ in range(warmup):
            pair.once(phase, barrier)
        out[phase] = [pair.once(phase, barrier) for _ in range(iters)]
    return out
