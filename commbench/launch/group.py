"""One launch group of a Run: start its pending Cases, settle what each attempt came to (settle.py),
store the settled rows, and start again for what is left, until nothing is pending."""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import StorageFull
from ..runfolder import RunFolder
from ..runfolder.writer import STORAGE_FULL_EXIT
from ..runfolder.writers_lock import SHARED_VAR
from ..safety import KILL_SWITCHES
from .failure_hosts import on_hosts
from .prepare import settled_row, variant_env
from .settle import Attempt, settle
from .start_retry import console_note, failed_to_start_reason, start_until_ranks_run
from .supervise import run_launch


@dataclass
class GroupContext:
    """What every launch group of a wave shares. ``cancel`` is set only in a wave of several
    launches: other launches' rank 0s then append to the folder too (under ``lock``)."""

    folder: RunFolder
    by_id: dict
    display: object
    retries: int = 0
    deadline: float | None = None
    cancel: object = None
    lock: object = field(default_factory=nullcontext)

    @property
    def shared(self) -> bool:
        return self.cancel is not None


def log_tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    interesting = [ln for ln in text if ln.strip() and not ln.startswith("===")]
    return " | ".join(interesting[-lines:])[-600:]


def launch_record(launch, held_off: bool) -> dict:
    """run.json's entry for a launch; status ``running`` until it ends (then ok, failed or timeout).
    Its env says what the ranks got: a launch that did not opt in to multicast holds the switches
    off whatever the suite set (``env_not_held`` keeps what the suite asked)."""
    env = dict(launch.env)
    asked = {k: env[k] for k in KILL_SWITCHES if k in env and env[k] != KILL_SWITCHES[k]} if held_off else {}
    env.update({k: KILL_SWITCHES[k] for k in asked})
    return {"launch_id": launch.launch_id, "ranks": launch.ranks, "env": env,
            **({"env_not_held": asked} if asked else {}),
            "hosts": list(launch.hosts), "variant": launch.variant,
            "log": f"logs/launch-{launch.launch_id}.log", "status": "running", "reason": "", "wall_s": 0.0}


def _locked(fn, lock):
    def call(*args):
        with lock:
            return fn(*args)
    return call


def _start(ctx: GroupContext, launch, pending: list[str], record: dict, attempt: int):
    """One attempt (with its start retries); (the outcome, the last attempt number, StartFailure)."""
    folder, by_id = ctx.folder, ctx.by_id
    progress = folder.path / "logs" / f"launch-{launch.launch_id}.progress.jsonl"
    task = {"launch_id": launch.launch_id, "attempt": attempt, "ranks": launch.ranks,
            "ranks_per_node": launch.ranks_per_node, "case_ids": pending, "log": record["log"],
            "progress": str(progress), "hosts": list(launch.hosts)}
    timeouts = {cid: by_id[cid].timeout_s for cid in pending}
    allow_mc = any(by_id[cid].param("allow_multicast") for cid in pending)
    with ctx.lock:
        env = variant_env(folder, launch, [by_id[cid] for cid in pending])
    wave_kw: dict = {"cancel": ctx.cancel, "shared": True} if ctx.shared else {}
    if ctx.shared:   # its rank 0 appends beside the other launches' ones
        env[SHARED_VAR] = "1"
    if ctx.deadline is not None:
        wave_kw["deadline"] = ctx.deadline
    return start_until_ranks_run(
        lambda n: run_launch(folder.path, {**task, "attempt": n}, env, timeouts,
                             on_event=_locked(ctx.display.event, ctx.lock), allow_multicast=allow_mc,
                             keep_fds=folder.lock_fds(), **wave_kw),
        folder.path, task, ctx.retries, record, note=_locked(console_note(ctx.display), ctx.lock),
        deadline=ctx.deadline, cancel=ctx.cancel)


def _went_wrong(out, pending: list[str]) -> bool:
    """Whether settle will quote the log (a kill, a crash, a failed or short launch): only then is
    the launch's log, which NCCL's debug output can make large, read for its tail."""
    return bool(out.timed_out_case or out.crashed_case or out.returncode != 0
                or not set(out.finished) >= set(pending))


def _facts(ctx: GroupContext, launch, record: dict, out, start_failed, pending: list[str]) -> Attempt:
    folder = ctx.folder
    with ctx.lock:
        if (out.timed_out_case or out.crashed_case) and not ctx.shared:
            folder.keep_samples(folder.done_case_ids())   # samples stay only for Cases whose row landed
        stored = frozenset(folder.done_case_ids())
    wrong = _went_wrong(out, pending)
    return Attempt(launch_id=launch.launch_id, returncode=out.returncode, finished=frozenset(out.finished),
                   stored=stored, timed_out_case=out.timed_out_case, crashed_case=out.crashed_case,
                   wave_over=ctx.deadline is not None and time.time() >= ctx.deadline,
                   start_failure=failed_to_start_reason(start_failed) if start_failed is not None else None,
                   log=record["log"], log_tail=log_tail(folder.path / record["log"]) if wrong else "",
                   hosts_note=on_hosts(folder.path, launch) if wrong else "")


def _storage_full(folder: RunFolder, log: str) -> StorageFull:
    return StorageFull(f"the disk of {folder.path} is full (rank 0 could not store a Case, log {log}); "
                       f"the run stopped. Every Case stored before is kept and the folder is consistent: "
                       f"free space, then continue with `commbench run SUITE --resume --out {folder.path}`")


def run_group(ctx: GroupContext, launch, pending: list[str], record: dict) -> dict:
    """Run a launch's pending Cases, starting it again after a timeout or a crash, until every one
    has a row; returns ``record`` (its run.json entry), updated in place."""
    folder = ctx.folder
    record["status"] = "ok"   # until a Case of it times out or fails
    attempt = 0
    while pending:
        out, attempt, start_failed = _start(ctx, launch, pending, record, attempt)
        record["wall_s"] += out.wall_s
        if out.returncode == STORAGE_FULL_EXIT:   # rank 0 could not store a Case: the disk is full
            if not ctx.shared:
                folder.rewrite_csv()
            raise _storage_full(folder, record["log"])
        settled = settle(_facts(ctx, launch, record, out, start_failed, pending), pending,
                         {cid: ctx.by_id[cid].timeout_s for cid in pending})
        for row in settled.rows:
            with ctx.lock:
                folder.append_row(settled_row(ctx.by_id[row.case_id], row.status, row.reason, record["log"],
                                              launch.ranks, attempt))
                ctx.display.event({"event": "done", "case_id": row.case_id, "status": row.status})
        if settled.launch_status is not None:
            record.update(status=settled.launch_status[0], reason=settled.launch_status[1])
        pending = list(settled.pending)
        attempt += 1
    if not ctx.shared:   # rank 0 may have been killed between a row's JSONL line and its CSV line
        folder.rewrite_csv()
    return record
