"""Timing a training step: the timed steps, their timeline, and two cross-check runs.

- step: compute and communication as scheduled, bracketed by CUDA events (GPU) or the host clock
  (CPU): the row's ``time_us`` and the phase marks fwd / bwd / optim. Nothing records it.
- profiled: right after the timed steps (no drain between, so in-flight work carries over as in
  training), ``step_split.profiled_steps(iters)`` more steps of the same schedule, recorded on a
  timeline (GPU: the CUPTI records through torch.profiler, measure/gpu_timeline.py; CPU: the host
  regions the schedule reports, measure/host_timeline.py). Each step's window is split into
  compute, communication, exposed communication and idle time (measure/step_split.py): the row's
  split columns, whose own step is ``step_us``. A batch of its own so the profiler's cost never
  lands in ``time_us``; on the CPU the host regions cost next to nothing, but the structure is the
  same, so both sources mean the same thing.
- compute: the same schedule with every collective skipped (``compute_alone_us``);
- comm: the step's collectives replayed with compute removed (``comm_alone_us``).
The old estimate, step minus compute-alone, stays as ``exposed_comm_sub_us``.

Ranks meet at a barrier before each batch, with no host synchronisation inside it.
"""
from __future__ import annotations

import statistics
import time

from ...measure import step_split
from .comm import Replay
from .schedule import NullTimer

PHASES = ("fwd", "bwd", "optim")
MODES = ("step", "compute", "comm")
PER_STEP = ("step_us", "compute_us", "comm_us", "copy_us", "exposed_comm_us", "idle_us")


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
    """(per-step totals, per-step phases) of a timed batch, nothing recording it."""
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


def _profiled(run, steps: int, barrier, sync, timeline) -> None:
    """A batch of ``steps`` recorded on ``timeline`` (its windows and intervals), untimed."""
    with timeline.capture():
        sync()
        barrier()
        for i in range(steps):
            with timeline.step(i):
                run(NullTimer())
        sync()


def run_modes(schedule, comm, warmup: int, iters: int, cuda: bool, barrier, sync, timeline) -> dict:
    """{mode: (per-iteration totals, per-iteration phases)} on this rank, and the profiled batch of
    step_split.profiled_steps(iters) steps recorded on ``timeline`` (a GpuTimeline or
    HostTimeline, which the Comm reports to on the CPU) right after the timed step batch."""
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
            out[mode] = _batch(runs[mode], iters, cuda, barrier, sync)
            if mode == "step":
                comm.timeline = host
                _profiled(schedule.step, step_split.profiled_steps(iters), barrier, sync, timeline)
                comm.timeline = None
            schedule.drain()
            replay.drain()
            sync()
    finally:
        comm.mode, comm.timeline = "full", None
    return out


def rank_result(modes: dict, timeline, iters: int) -> dict:
    """What one rank sends to the others: its mode timings and the profiled batch's per-step splits."""
    windows = timeline.windows
    splits = step_split.split_steps(timeline.intervals, windows) if windows else []
    note = timeline.note
    want = step_split.profiled_steps(iters)
    if windows and len(windows) != want:
        note = note or f"the timeline has {len(windows)} step(s) of {want}"
    return {"modes": modes, "splits": splits, "note": note}


def slowest_median(per_rank: list[list[float]]) -> float:
    """Median over iterations of the slowest rank's time."""
    return statistics.median(max(vals) for vals in zip(*per_rank))


def summarize(gathered: list[dict]) -> dict:
    """Row columns from every rank's rank_result (see docs/families/training.md): the timed
    batch's phases and cross-checks, the profiled batch's split of the slowest rank (its step is
    ``step_us``; ``time_us`` is the timed batch's, samples())."""
    cols: dict = {}
    modes = [g["modes"] for g in gathered]
    step_timed = slowest_median([m["step"][0] for m in modes])
    cols["compute_alone_us"] = slowest_median([m["compute"][0] for m in modes])
    cols["comm_alone_us"] = slowest_median([m["comm"][0] for m in modes])
    cols["exposed_comm_sub_us"] = max(0.0, step_timed - cols["compute_alone_us"])
    for phase in PHASES:
        per_rank = [[p.get(phase) for p in m["step"][1]] for m in modes]
        if all(v is not None for vals in per_rank for v in vals):
            cols[f"{phase}_us"] = slowest_median(per_rank)
    notes = [f"rank {r}: {g['note']}" for r, g in enumerate(gathered) if g["note"]]
    if notes or not all(g["splits"] for g in gathered):
        cols["timeline_note"] = "; ".join(notes) or "no timeline"
        return cols
    rank, split = step_split.slowest([step_split.mean_split(g["splits"]) for g in gathered])
    cols.update(split)
    cols["slowest_rank"] = rank
    cols["profiled_steps"] = len(gathered[rank]["splits"])
    return cols


def samples(mine: dict) -> list[float]:
    """This rank's per-iteration step times, from the timed batch (the row's time_us)."""
    return list(mine["modes"]["step"][0])


def sample_columns(mine: dict) -> dict[str, list[float]]:
    """This rank's per-iteration columns for samples.csv (beside time_us = the timed step): the
    cross-checks and phases of iteration i, and the split of the profiled batch's step i (its
    own step_us; only the first profiled_steps iterations carry one)."""
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
