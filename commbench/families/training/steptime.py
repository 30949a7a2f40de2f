"""Timing a training step: the step's own timeline, and two cross-check runs of the same schedule.

- step: compute and communication as scheduled, recorded on a timeline (GPU: the CUPTI records
  through torch.profiler, measure/gpu_timeline.py; CPU: the host regions the schedule reports,
  measure/host_timeline.py). Each step's window is split into compute, communication, exposed
  communication and idle time (measure/step_split.py): those are the row's columns. The step is
  also bracketed by CUDA events (GPU) or the host clock for the phase marks fwd / bwd / optim.
- compute: the same schedule with every collective skipped (`compute_alone_us`);
- comm: the step's collectives replayed with compute removed (`comm_alone_us`).
The old estimate, step minus compute-alone, stays as `exposed_comm_sub_us`.

Ranks meet at a barrier before each batch, with no host synchronisation inside it.
"""
from __future__ import annotations

import statistics
import time
from contextlib import nullcontext

from ...measure import step_split
from .comm import Replay
from .schedule import NullTimer

PHASES = ("fwd", "bwd", "optim")
MODES = ("step", "compute", "comm")
PER_STEP = ("compute_us", "comm_us", "copy_us", "exposed_comm_us", "idle_us")


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


def _batch(run, iters: int, cuda: bool, barrier, sync, timeline=None) -> tuple[list[float], list[dict]]:
    timers = []
    with timeline.capture() if timeline is not None else nullcontext():
        sync()
        barrier()
        for i in range(iters):
            with timeline.step(i) if timeline is not None else nullcontext():
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


def run_modes(schedule, comm, warmup: int, iters: int, cuda: bool, barrier, sync, timeline) -> dict:
    """{mode: (per-iteration totals, per-iteration phases)} on this rank; the step batch is
    recorded on ``timeline`` (a GpuTimeline or HostTimeline), which the Comm reports to."""
    comm.mode = "full"
    comm.start_recording()             # the first warm-up step also records what it sends
    schedule.step(NullTimer())
    comm.recording = False
    replay = Replay(comm.log, comm)
    runs = {"step": schedule.step, "compute": schedule.step, "comm": lambda _timer: replay.step()}
    host = timeline if timeline.source == "host" else None   # the GPU's records need no reports
    out = {}
    try:
        for mode in MODES:
            comm.mode = "compute" if mode == "compute" else "full"
            for _ in range(warmup - (1 if mode == "step" else 0)):
                runs[mode](NullTimer())
            comm.timeline = host if mode == "step" else None
            out[mode] = _batch(runs[mode], iters, cuda, barrier, sync, timeline if mode == "step" else None)
            comm.timeline = None
            schedule.drain()
            replay.drain()
            sync()
    finally:
        comm.mode, comm.timeline = "full", None
    return out


def rank_result(modes: dict, timeline) -> dict:
    """What one rank sends to the others: its mode timings and its per-step splits."""
    windows = timeline.windows
    splits = step_split.split_steps(timeline.intervals, windows) if windows else []
    note = timeline.note
    if windows and len(windows) != len(modes["step"][0]):
        note = note or f"the timeline has {len(windows)} step(s) of {len(modes['step'][0])}"
    return {"modes": modes, "splits": splits, "note": note}


def slowest_median(per_rank: list[list[float]]) -> float:
    """Median over iterations of the slowest rank's time."""
    return statistics.median(max(vals) for vals in zip(*per_rank))


def summarize(gathered: list[dict]) -> dict:
    """Row columns from every rank's rank_result (see docs/families/training.md)."""
    cols: dict = {}
    modes = [g["modes"] for g in gathered]
    step_events = slowest_median([m["step"][0] for m in modes])
    cols["compute_alone_us"] = slowest_median([m["compute"][0] for m in modes])
    cols["comm_alone_us"] = slowest_median([m["comm"][0] for m in modes])
    cols["exposed_comm_sub_us"] = max(0.0, step_events - cols["compute_alone_us"])
    for phase in PHASES:
        per_rank = [[p.get(phase) for p in m["step"][1]] for m in modes]
        if all(v is not None for vals in per_rank for v in vals):
            cols[f"{phase}_us"] = slowest_median(per_rank)
    notes = [f"rank {r}: {g['note']}" for r, g in enumerate(gathered) if g["note"]]
    if notes or not all(g["splits"] for g in gathered):
        cols["timeline_note"] = "; ".join(notes) or "no timeline"
        cols["step_us"] = step_events
        return cols
    rank, split = step_split.slowest([step_split.mean_split(g["splits"]) for g in gathered])
    cols.update(split)
    cols["slowest_rank"] = rank
    return cols


def samples(mine: dict) -> list[float]:
    """This rank's per-iteration step times: its timeline's windows, else the step's clock."""
    if mine["splits"] and not mine["note"]:
        return [s["step_us"] for s in mine["splits"]]
    return list(mine["modes"]["step"][0])


def sample_columns(mine: dict) -> dict[str, list[float]]:
    """This rank's per-iteration columns for samples.csv (beside time_us = the step)."""
    modes = mine["modes"]
    cols = {"compute_alone_us": modes["compute"][0], "comm_alone_us": modes["comm"][0]}
    if mine["splits"] and not mine["note"]:
        for key in PER_STEP:
            cols[key] = [s[key] for s in mine["splits"]]
    for phase in PHASES:
        vals = [p.get(phase) for p in modes["step"][1]]
        if all(v is not None for v in vals):
            cols[f"{phase}_us"] = vals
    return cols
