"""A step's timeline on the host, where there is no GPU to trace (gloo on the CPU).

The step's own code reports its regions: ``step(i)`` brackets a step, ``comm_started`` /
``comm_done`` a collective (from its issue to its completion, which the transport reports on
its own thread when it can, else the wait that saw it done), ``blocked`` a wait of the main
thread. The main thread computes whenever it is inside a step and not blocked, so:

- comm intervals: issue to completion of each collective;
- compute intervals: each step window minus the blocked waits.

The same split as on a GPU then follows (step_split.py): communication while the main thread
waited is exposed, waiting with no communication in flight is idle.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

from ..spans import subtract


def now_us() -> float:
    return time.perf_counter_ns() / 1e3


class HostTimeline:
    source = "host"

    def __init__(self):
        self.note = ""
        self._windows: list[tuple[float, float]] = []
        self._comm: dict[int, list] = {}
        self._blocked: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._next = 0

    @contextmanager
    def capture(self):
        yield self

    @contextmanager
    def step(self, i: int):
        start = now_us()
        try:
            yield
        finally:
            self._windows.append((start, now_us()))

    def comm_started(self, name: str) -> int:
        with self._lock:
            token = self._next
            self._next += 1
            self._comm[token] = [name, now_us(), None]
        return token

    def comm_done(self, token: int, at_us: float | None = None) -> None:
        """Mark a collective done (first report wins: the transport's, else the wait's)."""
        t = now_us() if at_us is None else at_us
        with self._lock:
            entry = self._comm.get(token)
            if entry is not None and entry[2] is None:
                entry[2] = t

    def blocked(self, start_us: float, end_us: float) -> None:
        self._blocked.append((start_us, end_us))

    @property
    def windows(self) -> list[tuple[float, float]]:
        base = self._windows[0][0] if self._windows else 0.0
        return [(s - base, e - base) for s, e in self._windows]

    @property
    def intervals(self) -> list[dict]:
        """comm and compute intervals, on the windows' clock (first step at 0)."""
        if not self._windows:
            return []
        base = self._windows[0][0]
        out = []
        for name, start, end in self._comm.values():
            if end is not None:
                out.append({"kind": "comm", "stream": "host", "start_us": start - base, "end_us": end - base,
                            "name": name})
        for s, e in subtract(self._windows, self._blocked):
            out.append({"kind": "compute", "stream": "main", "start_us": s - base, "end_us": e - base,
                        "name": "host compute"})
        out.sort(key=lambda iv: (iv["start_us"], iv["end_us"]))
        return out
