"""How far a suite may expand: Cases per suite, ranks per launch, sizes, environment values.

Each limit has a default that no real suite reaches and a documented way to lift it
(`--max-cases`, `--max-ranks`); a refusal names the limit and the way (docs/suites.md)."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from .. import world

DEFAULT_MAX_CASES = 20_000          # the shipped suites expand to a few hundred
MIN_RANK_SLOTS = 8                  # always allowed: a few ranks sharing a small machine's cores
MAX_SIZE_BYTES = 1 << 40            # 1 TiB: above any device's memory
MAX_ENV_VALUE_CHARS = 4096          # far above any NCCL/NVSHMEM setting, far below the OS limit
MAX_ENV_VARS = 256                  # per benchmark


@dataclass
class SuiteLimits:
    """The limits one load of a suite applies. ``max_ranks`` None: what the launcher can start."""

    max_cases: int = DEFAULT_MAX_CASES
    max_ranks: int | None = None
    cases_used: int = field(default=0, compare=False)

    def rank_limit(self, gpu_count: int) -> tuple[int, str]:
        """(largest rank count a launch may ask for, how it was found / how to lift it)."""
        if self.max_ranks is not None:
            return self.max_ranks, f"--max-ranks {self.max_ranks}"
        slots, how = launcher_slots(gpu_count)
        return max(slots, MIN_RANK_SLOTS), f"{how}; pass --max-ranks N to start more"

    def take_cases(self, n: int) -> str | None:
        """Count ``n`` more Cases against the suite's cap; the refusal when it is passed."""
        self.cases_used += n
        if self.cases_used > self.max_cases:
            return (f"the suite expands to more than {self.max_cases} Cases (limit --max-cases; this "
                    f"benchmark alone adds {n}): narrow the sweeps, or pass --max-cases N to allow more")
        return None

    def sizes_refusal(self, n: int) -> str | None:
        """A size sweep with ``n`` points, refused before the list is built when it cannot fit."""
        if n > self.max_cases:
            return (f"the sweep has {n} sizes, more than the {self.max_cases} Cases a suite may hold "
                    f"(limit --max-cases): use a larger step or factor")
        return None


def factor_sweep_points(lo: int, hi: int, factor: float) -> int:
    """Number of points of a geometric sweep lo, lo*factor, ... <= hi (without building it)."""
    if hi < lo or lo <= 0:
        return 0
    if not math.isfinite(factor):
        return 1
    return int(math.log(hi / lo) / math.log(factor)) + 2   # one spare for rounding


def launcher_slots(gpu_count: int) -> tuple[int, str]:
    """How many ranks the launcher can start, and where that number came from.

    Inside an MPI job or a Slurm allocation: its task count. With COMMBENCH_HOSTS: the hosts times
    this host's slots. Otherwise this host: the larger of its CPU and GPU counts."""
    job = world.job_size()
    if job is not None:
        return job
    local = max(os.cpu_count() or 1, gpu_count)
    local_how = f"{os.cpu_count() or 1} CPUs, {gpu_count} GPUs on this host"
    hosts = [h for h in os.environ.get("COMMBENCH_HOSTS", "").replace(",", " ").split() if h]
    if hosts:
        return local * len(hosts), f"{len(hosts)} hosts in COMMBENCH_HOSTS x {local} ({local_how})"
    nodes = world.slurm_job_nodes()
    if nodes is not None:
        return local * nodes[0], f"{nodes[1]} x {local} ({local_how})"
    return local, local_how
