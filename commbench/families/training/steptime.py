"""Timing a training step as a whole, in three versions of the same schedule.

- step: compute and communication as scheduled (`step_us`, and the phase
  marks fwd / bwd / optim inside it);
- compute: the same schedule with every collective skipped (`compute_us`);
- comm: the step's collectives replayed with compute removed (`comm_us`).

On a GPU each step is bracketed by CUDA events on the compute stream (a
step's last wait puts all its communication before the end event), with no
host synchronisation inside a batch; on the CPU by the host clock. Ranks
meet at a barrier before each batch. Per iteration the slowest rank counts.
"""
from __future__ import annotations

import statistics
import time

from .comm import Replay
from .schedule import NullTimer

PHASES = ("fwd", "bwd", "optim")
MODES = ("step", "compute", "comm")


class _HostTimer:
    def __init__(self):
        self.marks = [("start", time.perf_counter())]

    def mark(self, name: str) -> None:
        self.marks.append((name, time.perf_counter()))

    def times_us(self) -> list[tuple[str, float]]:
        return [(n, t * 1e6) for n, t in self.marks]


class _EventTimer:
    def __init__(self):
        import torch

        self._torch = torch
        self.marks = []
        self.mark("start")

    def mark(self, name: str) -> None:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        self.marks.append((name, event))

    def times_us(self) -> list[tuple[str, float]]:
        first = self.marks[0][1]
        return [(n, first.elapsed_time(e) * 1e3) for n, e in self.marks]


def _batch(run, iters: int, cuda: bool, barrier, sync) -> tuple[list[float], list[dict]]:
    timers = []
    sync()
    barrier()
    for _ in range(iters):
        timer = _EventTimer() if cuda else _HostTimer()
        run(timer)
        timer.mark("end")
        timers.append(timer)
    sync()
    totals, phases = [], []
    for timer in timers:
        marks = timer.times_us()
        totals.append(marks[-1][1] - marks[0][1])
        phases.append({name: t - prev for (name, t), (_n, prev) in zip(marks[1:], marks) if name != "end"})
    return totals, phases


def run_modes(schedule, comm, warmup: int, iters: int, cuda: bool, barrier, sync) -> dict:
    """{mode: (per-iteration totals, per-iteration phases)} on this rank, plus the comm log."""
    comm.mode = "full"
    comm.start_recording()             # the first warm-up step also records what it sends
    schedule.step(NullTimer())
    comm.recording = False
    replay = Replay(comm.log, comm)
    runs = {"step": schedule.step, "compute": schedule.step, "comm": lambda _timer: replay.step()}
    out = {}
    try:
        for mode in MODES:
            comm.mode = "compute" if mode == "compute" else "full"
            for _ in range(warmup - (1 if mode == "step" else 0)):
                runs[mode](NullTimer())
            out[mode] = _batch(runs[mode], iters, cuda, barrier, sync)
            schedule.drain()
            replay.drain()
            sync()
    finally:
        comm.mode = "full"
    return out


def slowest_median(per_rank: list[list[float]]) -> float:
    """Median over iterations of the slowest rank's time."""
    return statistics.median(max(vals) for vals in zip(*per_rank))


def summarize(gathered: list[dict]) -> dict:
    """Row columns from every rank's run_modes output (see docs/families/training.md)."""
    cols = {}
    for mode, name in (("step", "step_us"), ("compute", "compute_us"), ("comm", "comm_us")):
        cols[name] = slowest_median([g[mode][0] for g in gathered])
    for phase in PHASES:
        per_rank = [[p.get(phase) for p in g["step"][1]] for g in gathered]
        if all(v is not None for vals in per_rank for v in vals):
            cols[f"{phase}_us"] = slowest_median(per_rank)
    exposed = max(0.0, cols["step_us"] - cols["compute_us"])
    cols["exposed_comm_us"] = exposed
    cols["overlap_pct"] = (100.0 * min(1.0, max(0.0, 1.0 - exposed / cols["comm_us"]))
                           if cols["comm_us"] > 0 else None)
    return cols


def sample_columns(mine: dict) -> dict[str, list[float]]:
    """This rank's per-iteration columns for samples.csv (beside time_us = the step)."""
    cols = {"compute_us": mine["compute"][0], "comm_us": mine["comm"][0]}
    for phase in PHASES:
        vals = [p.get(phase) for p in mine["step"][1]]
        if all(v is not None for v in vals):
            cols[f"{phase}_us"] = vals
    return cols
