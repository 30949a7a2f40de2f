"""Entry point of one rank started by `commbench run` under mpiexec/srun.

    python -m commbench.rank RUN_DIR TASK_JSON
"""
from __future__ import annotations

import os

# First act of the rank: read the multicast kill switches before any other commbench code runs, so
# whatever changed them (a sitecustomize, a .pth file) is caught and the rank refuses to measure.
# Both copies are read: os.environ, and the C environment (libc getenv) that NCCL and NVSHMEM read,
# which a library's setenv changes without os.environ knowing (safety is stdlib-only).
_SWITCHES_AT_START = {k: os.environ[k] for k in ("NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS",
                                                "TORCH_SYMM_MEM_DISABLE_MULTICAST") if k in os.environ}
from .safety import c_switch_values  # noqa: E402

_C_SWITCHES_AT_START = c_switch_values()

import gc  # noqa: E402 - the switches are read before anything else

# Start-up is CPU that the ranks of concurrent launches share: the cyclic collector would walk the
# objects imports make again and again (about a fifth of a rank's import CPU). It stays off until
# the Cases' modules are in, and what they made is then kept out of its reach (_load_before_mpi).
if __name__ == "__main__":
    gc.disable()

import atexit  # noqa: E402
import faulthandler  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from .errors import CommbenchError  # noqa: E402
from .families import get_family  # noqa: E402
from .launch import health_probe  # noqa: E402
from .launch.lifeline import watch_parent  # noqa: E402
from .launch.plan_env import rebuilt_case  # noqa: E402
from .runfolder import RunFolder  # noqa: E402
from .runner import Progress, run_cases  # noqa: E402
from .safety import active_kill_switches  # noqa: E402
from .world import build_world  # noqa: E402


def main(argv: list[str]) -> int:
    watch_parent()   # a rank never outlives the commbench run that launched it
    run_dir, task_path = Path(argv[0]), Path(argv[1])
    task = json.loads(task_path.read_text())
    plan = json.loads((run_dir / "plan.json").read_text())
    by_id = {c["case_id"]: c for c in plan["cases"]}
    try:   # withheld secret values come from this rank's environment (the launch's), never from disk
        cases = [rebuilt_case(by_id[cid], os.environ) for cid in task["case_ids"]]
    except CommbenchError as exc:
        print(f"commbench: {exc}", file=sys.stderr)
        return 3
    _load_before_mpi(cases)
    world = build_world()
    _arm_stack_dump(run_dir, task["launch_id"], world.rank)
    if world.size != task["ranks"]:
        from .launch.inprocess import pmi_mismatch

        print("commbench: " + (pmi_mismatch(world.size) or
                               f"launch expected {task['ranks']} ranks, MPI started {world.size}"),
              file=sys.stderr)
        return 3
    # what NCCL and NVSHMEM read; a split from os.environ shows here and fails every Case
    at_start = active_kill_switches(_C_SWITCHES_AT_START)
    if _C_SWITCHES_AT_START != _SWITCHES_AT_START:
        at_start = {**at_start, "<C environment differs from os.environ>": json.dumps(_SWITCHES_AT_START)}
    seen = world.comm.gather(at_start, root=0)
    if world.is_root:
        hosts_file = run_dir / "logs" / f"launch-{task['launch_id']}.hosts.json"
        hosts_file.write_text(json.dumps({"hosts": list(world.hosts), "num_nodes": world.num_nodes,
                                          "kill_switches_seen": {str(r): v for r, v in enumerate(seen)}}))
    gpus_file = run_dir / "logs" / f"launch-{task['launch_id']}.gpus.json"
    health = health_probe.begin(run_dir, task, world)   # node-local rank 0: health.jsonl (docs/results.md)
    try:
        run_cases(cases, world, RunFolder(run_dir), task["log"], Progress(Path(task["progress"])),
                  switches_at_start=at_start,
                  on_bound=lambda record: gpus_file.write_text(json.dumps(record)))
    finally:
        health.end()
    world.barrier()
    return 0


def _load_before_mpi(cases: list) -> None:
    """Import what the Cases use before MPI starts. Ranks of a launch start unevenly (more so when
    launches share cores); the early ones then wait in MPI_Init, which sleeps between polls,
    rather than in a later collective, which spins on the core the late rank needs to import."""
    # numpy's BLAS would start a thread per core that spins a while; no Case uses numpy's BLAS
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy  # noqa: F401 - every launch of two or more ranks aligns clocks with it

    for family in {c.family for c in cases}:
        get_family(family)
    gc.freeze()
    gc.enable()


def _arm_stack_dump(run_dir: Path, launch_id: int, rank: int) -> None:
    """On SIGUSR1 (sent by the watchdog before it kills a hung launch) write every thread's
    Python stack to logs/launch-<k>.rank<r>.stacks.txt; the pid file tells the watchdog where to send it."""
    logs = run_dir / "logs"
    stacks = open(logs / f"launch-{launch_id}.rank{rank}.stacks.txt", "a")  # open for the process's life
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    pid_file = logs / f"launch-{launch_id}.rank{rank}.pid"
    pid_file.write_text(f"{socket.gethostname()} {os.getpid()}")
    atexit.register(pid_file.unlink, missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
