"""Start a launch again when its launcher failed before any rank started (launch/start_failure.py):
a daemon that did not report back in time, a job step Slurm refused, an ssh that timed out. Such
an attempt measured nothing, so the same pending Cases are started again, up to ``launch_retries``
times (suite key, COMMBENCH_LAUNCH_RETRIES over it; default 1) after a short pause, and always
within the wave's time limit. A launch in which a rank started is never started again here."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .start_failure import start_failure

BACKOFF_S = 2.0   # pause before retry n: n times this (a loaded machine or a slow node gets a moment)


@dataclass
class StartFailure:
    """A launch that still failed to start once its retries were spent (or no time was left)."""
    attempts: int
    message: str   # the first line of the launcher's start-failure message
    why_stopped: str = ""   # set when retries were left but the wave's time was not


def failed_to_start_reason(failure: StartFailure) -> str:
    n = failure.attempts
    return (f"launcher failed to start ranks ({n} attempt{'s' if n != 1 else ''}): {failure.message}"
            + (f" ({failure.why_stopped})" if failure.why_stopped else ""))


def start_until_ranks_run(start: Callable[[int], object], run_dir: Path, task: dict, retries: int,
                          record: dict, note: Callable[[str], None] | None = None,
                          deadline: float | None = None, cancel=None):
    """Run ``start(attempt)`` (one launch attempt: supervise.run_launch for ``task`` with that
    attempt number) until its ranks start, at most ``retries`` more times. Returns (the last
    outcome, the last attempt number, StartFailure or None). Each retry is appended to ``record``'s
    ``start_retries`` (attempt, reason, wall_s, backoff_s) and the failed attempts' time is added
    to its ``wall_s``; ``note`` shows a line on the console."""
    attempt, tries = task["attempt"], 0
    log = run_dir / task["log"]
    while True:
        tries += 1
        offset = log.stat().st_size if log.exists() else 0
        t0 = time.time()
        out = start(attempt)
        message = start_failure(run_dir, {**task, "attempt": attempt}, out, offset, t0)
        if message is None:
            return out, attempt, None
        if tries > retries:
            return out, attempt, StartFailure(tries, message)
        wait_s = BACKOFF_S * tries
        if deadline is not None and time.time() + wait_s >= deadline:
            return out, attempt, StartFailure(tries, message, "no retry: the wave's time limit leaves no time")
        if cancel is not None and cancel.is_set():
            return out, attempt, StartFailure(tries, message, "no retry: the wave was interrupted")
        record.setdefault("start_retries", []).append(
            {"attempt": attempt, "reason": message, "wall_s": round(out.wall_s, 3), "backoff_s": wait_s})
        record["wall_s"] = record.get("wall_s", 0.0) + out.wall_s
        (note or _stderr)(f"launch {task['launch_id']}: the launcher failed to start its ranks ({message}); "
                          f"retry {tries} of {retries} in {wait_s:.0f} s")
        if cancel is not None:
            cancel.wait(wait_s)
        else:
            time.sleep(wait_s)
        attempt += 1


def console_note(display) -> Callable[[str], None]:
    """Show a line about a launch (a retry) on the run's console, above the live progress line
    when there is one; on stderr for a display without a console. Shown with --quiet too."""
    console = getattr(display, "console", None)
    if console is None:
        return _stderr
    return lambda line: console.print(f"commbench: {line}", markup=False, highlight=False, soft_wrap=True)


def _stderr(line: str) -> None:
    print(f"commbench: {line}", file=sys.stderr, flush=True)
