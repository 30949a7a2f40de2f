"""How busy the machine was around a run: load average, CPU count and other processes on the GPUs,
taken before and after and stored in run.json (``machine_load``), so a comparison can say that a
slow point was measured on a busy machine instead of calling it a regression.

A machine counts as busy when the 1-minute load average, less the ranks commbench itself ran on
this host, is above BUSY_LOAD_PER_CPU per usable CPU, or when other processes held a GPU. Before a
run that follows another of this process (`run --repeat`, `accept`), what the previous run's ranks
still weigh in the 1-minute average is ours too: the kernel decays it by exp(-t/60)."""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from datetime import datetime, timezone

BUSY_LOAD_PER_CPU = 0.5
NVIDIA_SMI_TIMEOUT_S = 10.0
LOAD_AVG_1M_DECAY_S = 60.0   # the 1-minute load average forgets an exited process as exp(-t/60 s)
_last_snapshot: list[float] = []   # monotonic time of this process's previous snapshot


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def gpu_processes(exclude_pids: set[int] | None = None) -> list[dict] | None:
    """Compute processes on this host's GPUs (nvidia-smi), ours excluded; None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    procs = []
    for line in out.stdout.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 3 or not cols[0].isdigit():
            continue
        pid = int(cols[0])
        if exclude_pids and pid in exclude_pids:
            continue
        procs.append({"pid": pid, "name": cols[1], "used_mib": int(cols[2]) if cols[2].isdigit() else None,
                      "gpu_uuid": cols[3] if len(cols) > 3 else None})
    return procs


def snapshot(exclude_pids: set[int] | None = None) -> dict:
    """The machine's load now (this host)."""
    try:
        one, five, fifteen = os.getloadavg()
    except (AttributeError, OSError):
        one = five = fifteen = None
    pids = {os.getpid()} | set(exclude_pids or ())
    snap = {"utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "load_avg_1m": one, "load_avg_5m": five, "load_avg_15m": fifteen,
            "cpu_count": os.cpu_count(), "cpus_usable": _usable_cpus(),
            "gpu_processes": gpu_processes(pids)}
    now = time.monotonic()
    if _last_snapshot:   # this process ran a run before: how long ago it took its last look
        snap["own_previous_s"] = round(now - _last_snapshot[-1], 1)
    _last_snapshot[:] = [now]
    return snap


def own_load(snap: dict, when: str, own_ranks: int) -> float:
    """What commbench's own ranks weigh in a snapshot's 1-minute load average: all of them just
    after the run; before it, what is left of a previous run of this process."""
    if when == "after":
        return float(own_ranks)
    gap_s = snap.get("own_previous_s")
    if not isinstance(gap_s, (int, float)):
        return 0.0
    return own_ranks * math.exp(-max(0.0, gap_s) / LOAD_AVG_1M_DECAY_S)


def busy_reasons(load: dict | None, own_ranks: int = 0) -> list[str]:
    """Why a run's machine counts as busy (empty: quiet, or nothing recorded). ``load`` is run.json's
    ``machine_load`` ({"before": snapshot, "after": snapshot, "own_ranks": n})."""
    if not isinstance(load, dict):
        return []
    own_ranks = int(load.get("own_ranks", own_ranks) or 0)
    reasons = []
    for when in ("before", "after"):
        snap = load.get(when)
        if not isinstance(snap, dict):
            continue
        cpus = snap.get("cpus_usable") or snap.get("cpu_count") or 1
        one = snap.get("load_avg_1m")
        # ranks still counted in the 1-minute average are ours, not another user's
        others = None if one is None else one - own_load(snap, when, own_ranks)
        if others is not None and others > BUSY_LOAD_PER_CPU * cpus:
            reasons.append(f"load average {one:.1f} on {cpus} CPU(s) {when} the run")
        procs = snap.get("gpu_processes") or []
        if procs:
            names = ", ".join(f"{p.get('name')} (pid {p.get('pid')})" for p in procs[:3])
            more = f" and {len(procs) - 3} more" if len(procs) > 3 else ""
            reasons.append(f"{len(procs)} other process(es) on the GPUs {when} the run: {names}{more}")
    return reasons


def describe(run_label: str, meta: dict) -> str | None:
    """A one-line warning for a run whose machine was busy, or None."""
    reasons = busy_reasons(meta.get("machine_load"))
    if not reasons:
        return None
    return f"{run_label}: the machine was busy ({'; '.join(reasons)}): its times may be noisy or slow"
