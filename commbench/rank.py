"""Entry point of one rank started by `commbench run` under mpiexec/srun.

    python -m commbench.rank RUN_DIR TASK_JSON
"""
from __future__ import annotations

import atexit
import faulthandler
import json
import os
import signal
import socket
import sys
from pathlib import Path

from .families.base import Case
from .runfolder import RunFolder
from .runner import Progress, run_cases
from .world import build_world


def main(argv: list[str]) -> int:
    run_dir, task_path = Path(argv[0]), Path(argv[1])
    task = json.loads(task_path.read_text())
    plan = json.loads((run_dir / "plan.json").read_text())
    by_id = {c["case_id"]: Case.from_json(c["case"]) for c in plan["cases"]}
    cases = [by_id[cid] for cid in task["case_ids"]]
    world = build_world()
    _arm_stack_dump(run_dir, task["launch_id"], world.rank)
    if world.size != task["ranks"]:
        print(f"commbench: launch expected {task['ranks']} ranks, MPI started {world.size}", file=sys.stderr)
        return 3
    if world.is_root:
        hosts_file = run_dir / "logs" / f"launch-{task['launch_id']}.hosts.json"
        hosts_file.write_text(json.dumps({"hosts": list(world.hosts), "num_nodes": world.num_nodes}))
    run_cases(cases, world, RunFolder(run_dir), task["log"], Progress(Path(task["progress"])))
    world.barrier()
    return 0


def _arm_stack_dump(run_dir: Path, launch_id: int, rank: int) -> None:
    """On SIGUSR1 (sent by the watchdog before it kills a hung launch) write every thread's
    Python stack to logs/launch-<k>.rank<r>.stacks.txt; the pid file tells the watchdog where to send it."""
    logs = run_dir / "logs"
    stacks = open(logs / f"launch-{launch_id}.rank{rank}.stacks.txt", "a")  # noqa: SIM115 - lives with the process
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    pid_file = logs / f"launch-{launch_id}.rank{rank}.pid"
    pid_file.write_text(f"{socket.gethostname()} {os.getpid()}")
    atexit.register(pid_file.unlink, missing_ok=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
