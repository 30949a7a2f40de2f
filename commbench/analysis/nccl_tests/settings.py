"""What nccl-tests' own options stand for in commbench's parameters (docs/import.md): -u
(offset_bytes), -R (register and the `registered` column), -a (rank_time) and alltoallv_perf's
traffic pattern, and the per-iteration times reduced over processes as -a says."""
from __future__ import annotations

from commbench import metrics

from .records import ResultLine, TestRun

from ..nccl_tests_options import DEFAULT_AVERAGE, RANK_TIME, REGISTER


def settings_of(run: TestRun, op: str, elem: int, line: ResultLine) -> tuple[dict, str]:
    """(collectives parameters, the `registered` column) that nccl-tests' -u, -R, -a and alltoallv's
    traffic settings stand for. -u counts elements (nccl-tests shifts by u x the type's size);
    -R 2 on an NCCL before 2.27 registers as -R 1, and -R before 2.19 does nothing (nccl-tests'
    own fallbacks); a run that finished had its registration accepted (nccl-tests stops on a refusal)."""
    register = REGISTER[run.register or 0]
    registered = register if run.register is not None else "unknown (a table does not print -R)"
    nccl = run.nccl_library or 0
    if register == "window" and nccl and nccl < 22700:
        registered = "user"
    if register != "none" and nccl and nccl < 21900:
        registered = "none"
    params = {"offset_bytes": run.unalign * elem, "register": register,
              "rank_time": RANK_TIME[DEFAULT_AVERAGE if run.average is None else run.average]}
    if op == "alltoallv":
        params["traffic"] = alltoallv_traffic(run, line)
    return params, registered


def alltoallv_traffic(run: TestRun, line: ResultLine) -> str:
    """alltoallv_perf's pattern, from its environment (JSON): a matrix file, else the generated
    spread. A table has no environment: a row with count 0 but bytes moved is matrix mode (its
    per-peer count is 0 there), any other the generated pattern at nccl-tests' default spread."""
    env = run.env or {}
    if env.get("NCCL_TESTS_ALLTOALLV_MATRIX_FILE"):
        return env["NCCL_TESTS_ALLTOALLV_MATRIX_FILE"]
    if line.count == 0 and line.size_bytes > 0:
        return "matrix (file not recorded)"
    try:
        spread = min(1.0, max(0.0, float(env.get("NCCL_TESTS_ALLTOALLV_SPREAD", "1"))))
    except ValueError:
        spread = 1.0   # nccl-tests ignores a value it cannot read
    return f"spread:{spread:g}"


def reduced_times(samples: list[dict], rank_time: str) -> list[float]:
    """Per iteration, the processes' times reduced as the run's -a says (metrics.reduce_ranks; -a 0
    takes process 0's, -a 4 the sum). Each process's time is already its slowest GPU's."""
    per_proc: dict[int, list[float]] = {}
    for s in sorted(samples, key=lambda s: (s["rank"], s["iteration"])):
        per_proc.setdefault(s["rank"], []).append(s["time_us"])
    rows = [per_proc[p] for p in sorted(per_proc)]
    if rank_time == "sum":   # -a 4: nccl-tests only
        return [sum(vals) for vals in zip(*rows)]
    return metrics.reduce_ranks(rows, rank_time)
