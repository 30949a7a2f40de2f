"""Whether a launch failed before any of its ranks started: the launcher (mpiexec, srun) gave up
while starting its daemons or the job step, so nothing was measured and the launch may be retried
(launch/start_retry.py). Three things must all hold:

- the launcher exited with a non-zero status on its own (not killed by the watchdog),
- no rank reported in: no progress event, and none of the files a rank writes once MPI is up
  (logs/launch-N.rankR.pid and .stacks.txt, rank 0's logs/launch-N.hosts.json, .gpus.json) was
  written during the attempt,
- the attempt's launcher output holds one of the start-failure messages of START_FAILURES.

A rank that started and then hung or crashed is a measurement; it is never called a start failure.
"""
from __future__ import annotations

import re
from pathlib import Path

# (pattern, launcher, where the message comes from); docs/results.md, "Launches that fail to start",
# lists the same table. Each message is printed only while the launcher starts its daemons or step.
START_FAILURES: tuple[tuple[str, str, str], ...] = (
    (r"A daemon failed to report back after being spawned", "Open MPI 5 (PRRTE)",
     "PRRTE ssh launcher (plm/ssh): a daemon did not call back in time"),
    (r"unable to reliably start one or more daemons", "Open MPI 4 (ORTE), 5 (PRRTE)",
     "help-errmgr-base.txt [failed-daemon-launch]"),
    (r"daemon has unexpectedly failed after launch and before", "Open MPI 4 (ORTE), 5 (PRRTE)",
     "help-errmgr-base.txt [failed-daemon]"),
    (r"A daemon died unexpectedly .*while attempting", "Open MPI 4 (ORTE), 5 (PRRTE)",
     "help-plm-base.txt [daemon-died-no-signal], [daemon-died-signal]"),
    (r"The PMIx server's listener thread failed to start", "Open MPI 5 (PRRTE, PMIx)",
     "PMIx help-pmix-server.txt: prterun could not open its listener socket (its session directory)"),
    (r"srun returned non-zero exit status \(\d+\) from launching", "Open MPI 5 (PRRTE) under Slurm",
     "help-plm-slurm.txt [srun-failed]"),
    (r"one of the processes terminated badly; aborting", "MPICH / Hydra",
     "HYDT_bscu_wait_for_completion: a launch agent or proxy died"),
    (r"srun: error: Unable to create (job )?step", "Slurm srun",
     "step creation refused: \"Unable to create step for job %u: %m\""),
    (r"srun: error: Task launch for .* failed on node", "Slurm srun",
     "\"Task launch for %ps failed on node %s: %m\""),
    (r"srun: error: Application launch failed", "Slurm srun", "\"Application launch failed: %m\""),
    (r"ssh: (connect to host .*: |Could not resolve hostname )|Connection timed out during banner exchange",
     "ssh launch agent", "OpenSSH client errors (Open MPI and Hydra start their daemons with ssh)"),
)
_COMPILED = tuple(re.compile(p) for p, _launcher, _source in START_FAILURES)
MESSAGE_CHARS = 200   # a reason carries the first line of the launcher's message, cut to this


def launcher_message(log: Path, offset: int) -> str | None:
    """The first line of the launcher's output written after ``offset`` that is a known
    start-failure message, or None."""
    try:
        with open(log, errors="replace") as fh:
            fh.seek(offset)
            text = fh.read()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("==="):   # commbench's own lines in the log
            continue
        if any(rx.search(line) for rx in _COMPILED):
            return line.strip()[:MESSAGE_CHARS]
    return None


def ranks_reported(run_dir: Path, launch_id: int, ranks: int, since: float) -> bool:
    """Whether any rank of this launch wrote its start-up files since ``since`` (time.time()).
    The pid files are removed before each attempt (launch/supervise.py), so one that exists now is
    this attempt's; the others are dated."""
    logs = run_dir / "logs"
    dated = [logs / f"launch-{launch_id}.hosts.json", logs / f"launch-{launch_id}.gpus.json"]
    for rank in range(ranks):
        if (logs / f"launch-{launch_id}.rank{rank}.pid").exists():
            return True
        dated.append(logs / f"launch-{launch_id}.rank{rank}.stacks.txt")
    for path in dated:
        try:
            if path.stat().st_mtime >= since:
                return True
        except OSError:
            continue
    return False


def start_failure(run_dir: Path, task: dict, outcome, log_offset: int, t0: float) -> str | None:
    """The launcher's message when the attempt that began at ``t0`` (its log from ``log_offset``)
    failed before any rank started, else None (it ran, or it failed in a way that may be a rank's)."""
    if outcome.returncode in (0, None) or outcome.timed_out_case or outcome.crashed_case or outcome.started:
        return None
    # file times may be coarser than time.time(): a second's slack errs towards "a rank started"
    if ranks_reported(run_dir, task["launch_id"], task["ranks"], t0 - 1.0):
        return None
    return launcher_message(run_dir / task["log"], log_offset)
