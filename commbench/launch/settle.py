"""What one attempt of a launch becomes: a pure function from the facts of the attempt (exit status,
the Cases whose rows landed, the Case a timeout or a crash killed, whether the wave's time ran out)
to the rows the parent stores, the Cases the next attempt runs and the launch's status in run.json.
No process, folder or clock is touched here: tests/unit/test_settle.py holds every branch to it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

WAVE_LIMIT_REASON = "the wave's time limit ran out (wave_timeout)"


@dataclass(frozen=True)
class Attempt:
    """The facts of one attempt of a launch, gathered by the caller after it ended."""

    launch_id: int
    returncode: int
    finished: frozenset[str]          # Cases the ranks reported done
    stored: frozenset[str]            # Cases whose row is in the folder now (a kill may follow a row)
    timed_out_case: str | None = None  # the Case running when the watchdog killed the launch
    crashed_case: str | None = None    # the Case running when a rank died
    wave_over: bool = False           # the wave's time limit has passed
    start_failure: str | None = None  # why no rank ever started (retries spent), else None
    log: str = ""                     # the launch's log, relative to the run folder
    log_tail: str = ""                # its last interesting lines
    hosts_note: str = ""              # " on host(s) a, b" when the launch was placed, else ""


@dataclass(frozen=True)
class SettledRow:
    case_id: str
    status: str   # skipped, failed or timeout: a row the parent writes without a measurement
    reason: str


@dataclass(frozen=True)
class Settled:
    rows: tuple[SettledRow, ...]
    pending: tuple[str, ...]                  # what the next attempt runs; () ends the launch
    launch_status: tuple[str, str] | None     # (status, reason) for run.json, when it changes


def _stacks(launch_id: int) -> str:
    return f"launch killed, rank stacks in logs/launch-{launch_id}.rank*.stacks.txt"


def _killed_row(a: Attempt, victim: str, timeout_s: float) -> tuple[SettledRow, tuple[str, str]]:
    if a.timed_out_case:
        status = "timeout"
        why = WAVE_LIMIT_REASON if a.wave_over else f"no progress for {timeout_s:.0f} s"
        reason = f"{why}; {_stacks(a.launch_id)}"
    else:
        status, reason = "failed", f"ranks exited with status {a.returncode}"
    reason += a.hosts_note
    return SettledRow(victim, status, f"{reason} (log {a.log}): {a.log_tail}"), (status, reason)


def settle(a: Attempt, pending: Sequence[str], timeout_s: Mapping[str, float]) -> Settled:
    """The rows, next pending Cases and launch status that attempt ``a`` of ``pending`` comes to.

    - A Case killed by a timeout or a crash gets a timeout/failed row, unless its own row landed
      just before the kill (then it counts as finished); the rest run again in a fresh launch.
    - A launch that ended without a kill before finishing its Cases (bad environment, MPI failure,
      a launcher that never started ranks) fails every Case left, and the launch is over.
    - When the wave's time is up, the Cases not run end as timeout rows, and the launch is over."""
    finished = set(a.finished)
    victim = a.timed_out_case or a.crashed_case
    killed = victim is not None
    rows: list[SettledRow] = []
    status = None
    if victim is not None and victim in a.stored:
        finished.add(victim)   # its row landed just before the kill: keep the measurement
        victim = None
    if victim is not None:
        row, status = _killed_row(a, victim, timeout_s.get(victim, 0.0))
        rows.append(row)
        finished.add(victim)
    elif not killed and (a.returncode != 0 or not finished.issuperset(pending)):
        reason = (f"launch failed with status {a.returncode}{a.hosts_note} before finishing its Cases "
                  f"(log {a.log}): {a.log_tail}")
        if a.start_failure is not None:   # no rank ever ran: nothing about the node was measured
            reason = f"{a.start_failure}; launch{a.hosts_note} (log {a.log})"
        rows += [SettledRow(cid, "failed", reason) for cid in pending if cid not in finished]
        return Settled(tuple(rows), (), ("failed", reason))
    left = tuple(cid for cid in pending if cid not in finished)
    if a.wave_over and left:
        reason = f"{WAVE_LIMIT_REASON} before this Case ran{a.hosts_note} (log {a.log})"
        rows += [SettledRow(cid, "timeout", reason) for cid in left]
        return Settled(tuple(rows), (), ("timeout", reason))
    return Settled(tuple(rows), left, status)
