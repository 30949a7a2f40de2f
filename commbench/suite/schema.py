"""The suite schema: every key a suite may hold, with its help text, and the error collector
that names file, line and field (docs/suites.md)."""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import SuiteError

TIMINGS = ("auto", "events", "pipelined", "graph", "host")

# Keys valid both under `defaults:` and in a benchmark, with their help text.
COMMON_KEYS: dict[str, str] = {
    "ops": "operation or list of operations of the family (alias: op)",
    "backends": "backend or list of backends (alias: backend)",
    "dtypes": "element type or list (alias: dtype)",
    "sizes": "message sizes: a size ('64KiB'), a list, or {min, max, factor} / {min, max, step}",
    "ranks": "ranks per launch: an integer, 'all' (every task of the Slurm job; outside one, every GPU "
             "of the node), or a list",
    "ranks_per_node": "ranks on each node (default: all ranks on one node)",
    "timeout_s": "seconds a Case may run without finishing before its launch is killed (default 300)",
    "warmup": "untimed iterations before timing (default 5, fewer for messages over 64 MiB)",
    "iters": "timed iterations (default 20, fewer for messages over 64 MiB, never under 5)",
    "timing": "auto | events | pipelined | graph | host, or a list of them "
              "(auto: CUDA events on GPU, host clock on CPU)",
    "env": "environment variables for the launch; a list of values makes one variant (fresh launch) each",
    "params": "family parameters (see `commbench list`); lists expand to cross products",
    "profile": "none (default) | torch (torch.profiler trace of the timed batch) | nccl (commbench's NCCL "
               "profiler plugin: kernel time per channel, algorithm, proxy steps); docs/profiling.md",
    "placement": "together (default) | per_node (one launch per host) | pairs (every pair of hosts, "
                 "in rounds of disjoint pairs) | search (waves of host groups chosen from the last wave's "
                 "results: docs/accept.md, \"Strategies\"); hosts from COMMBENCH_HOSTS or the Slurm allocation",
    "check": "values (default: each result against its known answer) | bitwise (also N repetitions on identical "
             "inputs compared bit for bit, N = 10) | {mode: bitwise, repeats: N} (docs/suites.md, \"Checks\")",
    "search": "settings of placement: search: {seed, matchings, group_size, confirmations, max_waves, "
              "metric, max_excess_pct, min_share} (docs/accept.md, \"Strategies\")",
}
PLACEMENTS = ("together", "per_node", "pairs", "search")
# placement: search's settings and their defaults: the planner's (placement/search_plan.py) and how a
# group's rows are judged (placement/search_judge.py)
SEARCH_DEFAULTS: dict[str, int | float | str] = {
    "seed": 0, "matchings": 2, "group_size": 8, "confirmations": 2, "max_waves": 40,
    "metric": "time_us", "max_excess_pct": 50.0, "min_share": 0.5}
PROFILES = ("none", "torch", "nccl")
CHECK_MODES = ("values", "bitwise")   # `check:` (suite/check_key.py)
BENCH_KEYS: dict[str, str] = {"name": "benchmark name (unique in the suite)",
                              "family": "benchmark family (see `commbench list`)", **COMMON_KEYS}
TOP_KEYS: dict[str, str] = {
    "name": "suite name (used in the run folder name)",
    "description": "free text",
    "defaults": "keys applied to every benchmark unless it sets them",
    "benchmarks": "list of benchmarks",
    "rules": "acceptance rules (read by `commbench accept`, ignored by `run`)",
    "duration": "burn-in: run the suite pass after pass for this long (8h, 30m, 90s; `run --duration`)",
    "wave_timeout": "the most one wave of launches may take (20m, 90s); a launch still running then ends "
                    "as timeout rows (COMMBENCH_WAVE_TIMEOUT overrides it; default: no wave limit)",
    "launch_retries": "how often a launch whose launcher failed before any rank started is started again, "
                      "after a short pause (0-10; COMMBENCH_LAUNCH_RETRIES overrides it; default 1)",
    "share_gpu": "true: ranks may share a GPU when a launch has more ranks on a node than it has GPUs "
                 "(a correctness rehearsal, docs/rehearsal.md); default false: such launches are skipped "
                 "(run) or fail the preflight (accept)",
    "node": "the node the suite needs: {gpus, gpu_model, gpu_memory} (docs/suites.md, \"The node a suite "
            "needs\"); checked before anything is launched",
}
ALIASES = {"op": "ops", "backend": "backends", "dtype": "dtypes"}
LARGE_BYTES = 64 * 1024**2
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


MAX_SHOWN_PROBLEMS = 40      # an error lists at most this many problems...
MAX_PROBLEM_CHARS = 400      # ...each cut to this length: a message stays readable whatever the input


class SuiteErrors:
    """Collects every problem of a suite (file:line: field: message), raised together."""

    def __init__(self, path: Path):
        self.path, self.items = path, []
        self.count = 0   # problems found; `items` keeps the first MAX_SHOWN_PROBLEMS

    def add(self, line: int, where: str, msg: str) -> None:
        self.count += 1
        if len(self.items) < MAX_SHOWN_PROBLEMS:
            text = f"{self.path}:{line}: {where[:160]}: {msg}"
            self.items.append(text if len(text) <= MAX_PROBLEM_CHARS else text[:MAX_PROBLEM_CHARS] + "...")
        else:
            self.items.append(None)   # counted, not shown; len(items) still grows as callers expect

    def raise_if_any(self) -> None:
        if self.items:
            shown = [i for i in self.items if i is not None]
            more = self.count - len(shown)
            head = f"{self.path}: invalid suite ({self.count} problem(s))"
            raise SuiteError(head + "\n  " + "\n  ".join(shown)
                             + (f"\n  ... and {more} more" if more else ""))


def as_list(value) -> list:
    return list(value) if isinstance(value, list) else [value]
