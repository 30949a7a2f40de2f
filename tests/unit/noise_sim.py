"""Simulated back-to-back runs of the CPU quickstart's 152 points, held in memory, so compare's
false-alarm rate can be checked over many repetitions in a fraction of a second.

Each point has a base time (latency + size / bandwidth, MPI or gloo), its own within-run spread
(log-normal samples with occasional preemption outliers, as a shared CPU gives) and moves from
run to run by more than its samples suggest (see Machine), plus a machine-wide factor per run.
Under the old rule (Mann-Whitney on ten samples, 5% threshold, no correction) such pairs show
about half the points "changed", as issue 20 reported for two quiet quickstart runs."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from commbench.runfolder.reader import Run

SIZES = [8, 64, 512, 4096, 32768, 262144, 1048576, 4194304]
OPS7 = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv"]
OPS5 = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"]
BENCHES = [("mpi", False, OPS7), ("mpi", True, OPS5), ("gloo", False, OPS7)]
ITERS = 10


def points() -> list[dict]:
    out = []
    for backend, in_place, ops in BENCHES:
        for op in ops:
            for size in SIZES:
                out.append({"family": "collectives", "op": op, "backend": backend, "variant": "default",
                            "dtype": "float32", "size_bytes": size, "world_size": 2, "in_place": in_place})
    return out


class Machine:
    """The fixed character of one machine: every point's base time and noise levels.

    A point's within-run spread is an absolute jitter over its time plus ``within_floor`` (2 us MPI latencies
    spread by ~15%, a 1.4 ms 4 MiB all_reduce by ~0.5%); its run-to-run shift is ``between_factor``
    times that plus ``between_floor``, drawn from a Student t law with ``shift_dof`` degrees of
    freedom (heavy tails: a placement or a neighbour moves one point far more than usual)."""

    def __init__(self, seed: int = 7, between_factor: float = 1.5, between_floor: float = 0.003,
                 shift_dof: int = 5, within_floor: float = 0.005):
        rng = np.random.default_rng(seed)
        self.points = points()
        n = len(self.points)
        mpi = np.array([p["backend"] == "mpi" for p in self.points])
        size = np.array([p["size_bytes"] for p in self.points], dtype=float)
        self.base_us = np.where(mpi, 2.0 + size / 3000.0, 120.0 + size / 1500.0)
        jitter_us = np.where(mpi, 0.3, 15.0) * rng.uniform(0.5, 1.5, n)
        self.within = jitter_us / self.base_us + within_floor
        self.between = between_factor * self.within + between_floor
        self.shift_dof = shift_dof

    def run(self, rng: np.random.Generator, label: str, slow: dict | None = None) -> Run:
        """One simulated run; ``slow`` = {(op, backend): factor} slows those points' samples."""
        dof = self.shift_dof
        shift = self.between * rng.standard_t(dof, len(self.points)) / np.sqrt(dof / (dof - 2))
        machine = rng.normal(0.0, 0.01)
        rows, samples = [], []
        for j, p in enumerate(self.points):
            t = self.base_us[j] * np.exp(shift[j] + machine)
            t *= (slow or {}).get((p["op"], p["backend"]), 1.0)
            x = t * np.exp(rng.normal(0.0, self.within[j], ITERS))
            hit = rng.random(ITERS) < 0.05
            x[hit] *= rng.uniform(1.3, 3.0, hit.sum())
            cid = hashlib.sha1(repr(sorted(p.items())).encode()).hexdigest()[:12]
            rows.append({**p, "case_id": cid, "time_us": float(np.median(x)),
                         "busbw_gbps": p["size_bytes"] / (float(np.median(x)) * 1e3),
                         "status": "ok", "wrong": 0})
            samples += [{"case_id": cid, "rank": 0, "host": "sim", "gpu": "cpu", "iteration": i,
                         "time_us": float(v)} for i, v in enumerate(x)]
        return Run(path=Path(label), results=pd.DataFrame(rows), samples=pd.DataFrame(samples), meta={})
