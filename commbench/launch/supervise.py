"""Start the ranks of one launch group (argv from ``mpiexec``) and watch them.

Argv lists only, never a shell. A launch whose current Case runs past its
timeout, or whose ranks die, is killed; the parent records the row and
relaunches the Cases that remain.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import CommbenchError
from ..runfolder.writer import storage_marks, truncate_to
from ..runfolder.writers_lock import ATTEMPT_VAR, set_current_attempt
from .lifeline import (PARENT_VAR, attempt_value, die_with_parent_hook, end_attempt, parent_token, track,
                       untrack)
from .mpiexec import launcher_argv
from ..safety import EXPECTED_VAR, KILL_SWITCHES, launch_env

STARTUP_GRACE_S = 60.0  # process start, MPI init and imports before the first Case
KILL_GRACE_S = 5.0      # a killed launch's launcher gets this long to stop its daemons and ranks
PRTE_TMPDIR_VAR = "PRTE_MCA_prte_tmpdir_base"   # where Open MPI 5's prterun keeps its session directory
POLL_S = 0.1            # progress events and timeouts are looked at this often; an exit ends the wait


@dataclass
class LaunchOutcome:
    returncode: int | None
    timed_out_case: str | None  # case_id killed for running past its timeout
    crashed_case: str | None  # case_id in progress when the ranks died
    started: list[str]
    finished: list[str]
    wall_s: float
    attempt: int = 0   # the attempt this was (task["attempt"]): the `attempt` of the rows it settles


def _read_events(path: Path, offset: int) -> tuple[list[dict], int]:
    if not path.exists():
        return [], offset
    with open(path) as fh:
        fh.seek(offset)
        chunk = fh.read()
    complete = chunk[: chunk.rfind("\n") + 1]
    events = [json.loads(line) for line in complete.splitlines() if line.strip()]
    return events, offset + len(complete)


def run_launch(run_dir: Path, task: dict, variant_env: dict[str, str], timeouts: dict[str, float],
               on_event=None, allow_multicast: bool = False, keep_fds: tuple[int, ...] = (),
               cancel=None, shared: bool = False, deadline: float | None = None) -> LaunchOutcome:
    """Start one launch for ``task['case_ids']`` and supervise it until it ends or is killed.

    ``keep_fds`` stay open in the launcher for as long as it runs (the run folder's lock).
    ``cancel`` (a threading.Event) set by the caller kills the launch as Ctrl-C would. ``shared``:
    other launches of the same wave write the folder too, so a timeout does not cut the folder's
    files back to their length at the verdict (that would cut their rows). ``deadline`` (time.time()):
    the wave's time limit, past which the launch is killed as a hang."""
    task_path = run_dir / "logs" / f"launch-{task['launch_id']}-try{task['attempt']}.json"
    task_path.write_text(json.dumps(task))
    progress = Path(task["progress"])
    env = launch_env(run_dir, variant_env, allow_multicast)
    env[PARENT_VAR] = parent_token()   # the ranks exit when this process is gone (launch/lifeline.py)
    # marks every process of this attempt, and is the only attempt of the launch allowed to write
    env[ATTEMPT_VAR] = marker = attempt_value(task["launch_id"], task["attempt"])
    # Open MPI 5's session directory (its PMIx sockets) in a folder of this attempt's own: one left by
    # a killed prterun would make a later prterun that gets the same pid fail to start its listener
    session_dir = tempfile.mkdtemp(prefix=f"commbench-launch{task['launch_id']}-")
    env.setdefault(PRTE_TMPDIR_VAR, session_dir)
    forwarded = sorted(set(variant_env) | set(KILL_SWITCHES) | {"COMMBENCH_RUN_DIR", "COMMBENCH_LOG_DIR",
                                                                         EXPECTED_VAR, PARENT_VAR, ATTEMPT_VAR})
    argv = launcher_argv(task["ranks"], task["ranks_per_node"], forwarded, tuple(task.get("hosts", ()))) + [
        sys.executable, "-m", "commbench.rank", str(run_dir), str(task_path)]
    log_path = run_dir / task["log"]
    t0 = time.time()
    started, finished = [], []
    offset = progress.stat().st_size if progress.exists() else 0
    for rank in range(task["ranks"]):   # by name: a glob would read the whole logs folder every launch
        (run_dir / "logs" / f"launch-{task['launch_id']}.rank{rank}.pid").unlink(missing_ok=True)
    with open(log_path, "a") as log:
        log.write(f"\n=== launch {task['launch_id']} attempt {task['attempt']}: {' '.join(argv)}\n")
        log.flush()
        set_current_attempt(run_dir, task["launch_id"], marker)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, pass_fds=keep_fds,
                                preexec_fn=die_with_parent_hook())   # SIGTERM when commbench dies
        track(proc.pid, marker)   # the keeper and an exit of this process end it too
        timed_out = None
        try:
            timed_out, current = _supervise(proc, progress, offset, task, timeouts, on_event, run_dir,
                                            log, started, finished, cancel, shared, deadline, marker)
        except BaseException:
            # interrupted (Ctrl-C, SIGTERM from a batch system): never leave ranks running
            _kill(proc, marker)
            log.write("\n=== commbench: interrupted; launch killed\n")
            raise
        finally:
            _settle_tree(run_dir, task["launch_id"], proc, marker, log)
            shutil.rmtree(session_dir, ignore_errors=True)
    rc = proc.poll()
    crashed = current if (timed_out is None and rc not in (0, None)) else None
    return LaunchOutcome(rc, timed_out, crashed, started, finished, time.time() - t0, task["attempt"])


def _settle_tree(run_dir: Path, launch_id: int, proc: subprocess.Popen, marker: str, log) -> None:
    """The launcher exited (or was killed): nothing of this attempt may run on or write after it.
    Whatever it left behind (ranks of a launcher killed by someone else keep measuring) is killed
    before the launch can start again, and the attempt loses its right to write the folder."""
    left = end_attempt(proc, marker, grace_s=0.0)
    if left:
        log.write(f"\n=== commbench: the launcher exited with {left} process(es) of its launch still "
                  f"running; killed them\n")
    try:
        set_current_attempt(run_dir, launch_id, "")
    except (OSError, CommbenchError):   # a full disk: what is left of the attempt is dead anyway
        pass
    untrack(proc.pid)


def _supervise(proc, progress: Path, offset: int, task: dict, timeouts: dict, on_event, run_dir: Path,
               log, started: list, finished: list, cancel=None,
               shared: bool = False, deadline: float | None = None, marker: str = "") -> tuple[str | None, str | None]:
    """Follow progress events until the ranks exit or the current Case overruns its timeout.

    Returns (timed-out case id or None, case in progress when it ended or None)."""
    current, current_t = None, time.time()
    started_at = current_t - 1.0  # file mtimes may be coarser than time.time()
    with ExitWatch(proc) as exit_watch:   # one pidfd for the whole watch
        while True:
            rc = proc.poll()
            events, offset = _read_events(progress, offset)
            for ev in events:
                if ev["event"] == "start":
                    current, current_t = ev["case_id"], ev["t"]
                    started.append(current)
                elif ev["event"] == "done":
                    finished.append(ev["case_id"])
                    current, current_t = None, ev["t"]
                if on_event:
                    on_event(ev)
            if rc is not None:
                return None, current
            if cancel is not None and cancel.is_set():
                raise KeyboardInterrupt   # the wave was interrupted: kill this launch like Ctrl-C
            limit = timeouts.get(current, 0) if current else (
                STARTUP_GRACE_S + timeouts.get(_next_case(task, finished), 0))
            over = deadline is not None and time.time() >= deadline   # the wave's time limit
            if over or time.time() - current_t > limit:
                timed_out = current or _next_case(task, finished)
                # What rank 0 stores from now on comes after the verdict (a stopped rank woken by the
                # kill may still finish the Case): it is cut off once every rank is dead.
                marks = None if shared else storage_marks(run_dir)
                _dump_stacks(run_dir, task["launch_id"], since=started_at)
                _kill(proc, marker)
                if marks is not None:
                    truncate_to(run_dir, marks)
                why = "at the wave time limit" if over else f"after {limit:.0f} s without progress"
                log.write(f"\n=== commbench: killed {why} (case {timed_out})\n")
                return timed_out, current
            exit_watch.wait(POLL_S)


class ExitWatch:
    """Sleep up to a poll interval, waking at once when the launcher exits (Linux pidfd): a
    launch's end is seen when it happens, not up to a poll interval later (a wave waits for its
    slowest launch). The pidfd is opened once per launcher, not at every poll. Elsewhere, or for
    a launcher already reaped, a plain sleep."""

    def __init__(self, proc: subprocess.Popen):
        try:
            self.fd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self.fd = None

    def wait(self, timeout_s: float) -> None:
        if self.fd is None:
            time.sleep(timeout_s)
        else:
            select.select([self.fd], [], [], timeout_s)

    def __enter__(self) -> "ExitWatch":
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _next_case(task: dict, finished: list[str]) -> str | None:
    for cid in task["case_ids"]:
        if cid not in finished:
            return cid
    return None


def _pid_files(run_dir: Path, launch_id: int) -> list[Path]:
    return list((run_dir / "logs").glob(f"launch-{launch_id}.rank*.pid"))


def _dump_stacks(run_dir: Path, launch_id: int, since: float) -> None:
    """Ask every local rank of a hung launch to write its Python stacks (see commbench.rank).

    Only pid files written by this launch (newer than its start) on this host are used,
    so a stale file can never make us signal an unrelated process."""
    host, sent = socket.gethostname(), False
    for pid_file in _pid_files(run_dir, launch_id):
        try:
            fresh = pid_file.stat().st_mtime >= since
            file_host, pid = pid_file.read_text().split()
            if fresh and file_host == host:
                os.kill(int(pid), signal.SIGUSR1)
                sent = True
        except (ValueError, OSError):
            continue
    if sent:
        time.sleep(1.0)


def _kill(proc: subprocess.Popen, marker: str) -> None:
    """Stop a launch: SIGTERM to the launcher's group, then (after up to KILL_GRACE_S, or at once
    once the launcher is gone) SIGKILL to every process of its session and of its marker: ranks
    run in process groups of their own, and a stopped rank outlives a polite signal."""
    end_attempt(proc, marker, grace_s=KILL_GRACE_S)
