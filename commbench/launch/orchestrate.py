"""`commbench run`: plan a suite, start each launch group, supervise, store, plot, summarise."""
from __future__ import annotations

import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

from ..errors import StorageFull
from ..runfolder import RunFolder
from ..runfolder.writer import STORAGE_FULL_EXIT
from ..runfolder.writers_lock import SHARED_VAR
from ..safety import KILL_SWITCHES
from ..suite import load_suite
from ..world import inside_mpi_job
from .extras import require_torch_for
from .failure_hosts import on_hosts
from .prepare import (close_meta, open_meta, prepare_folder, record_unsupported, settled_row,
                      variant_env)
from .rank_records import merge_rank_records
from .search_run import run_search
from .start_retry import console_note, failed_to_start_reason, launch_retries, start_until_ranks_run
from .supervise import run_launch
from .waves import WaveState, pending_waves, plan_waves, run_wave, wave_timeout_s, waves_on

WAVE_LIMIT_REASON = "the wave's time limit ran out (wave_timeout)"
# What the caller does with a stored run before the folder is released (plots, summary, report).
Finish = Callable[[RunFolder, object], None]


def _log_tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    interesting = [ln for ln in text if ln.strip() and not ln.startswith("===")]
    return " | ".join(interesting[-lines:])[-600:]


def run_suite(suite_path: Path, out_dir: Path | None = None, *, resume: bool = False,
              console=None, show_progress: bool = True, overrides: dict | None = None,
              force: bool = False, limits=None, finish: Finish | None = None) -> Path:
    """Run every Case of a suite; return the run folder. Used by `run` and `accept`.

    ``overrides`` (`--set key=value`) replace a key in every benchmark; they are recorded.
    ``force`` lets a --resume continue with settings that differ from the folder's.
    ``limits`` (a suite.limits.SuiteLimits: `--max-cases`, `--max-ranks`) bound the expansion.
    ``finish(folder, console)`` runs once every row is stored, the folder still locked (rank 0 only
    inside an MPI job): the caller's plots, summary and report (launch never imports analysis)."""
    if inside_mpi_job():
        from .inprocess import run_suite_inside_mpi

        return run_suite_inside_mpi(Path(suite_path), out_dir, resume=resume, overrides=overrides,
                                    force=force, show_progress=show_progress, limits=limits, finish=finish)
    suite = load_suite(suite_path, overrides=overrides, limits=limits)
    require_torch_for(suite)
    folder = prepare_folder(suite, out_dir, resume)
    try:
        return _run_locked(suite, folder, resume, console, show_progress, overrides, force, finish)
    finally:
        folder.release()


def _run_locked(suite, folder: RunFolder, resume: bool, console, show_progress: bool,
                overrides: dict | None, force: bool, finish: Finish | None) -> Path:
    from ..ui import RunDisplay

    meta = open_meta(folder, suite, resume=resume, overrides=overrides, force=force,
                     own_ranks=max((l.ranks_per_node for l in suite.launches), default=0))
    folder.write_meta(meta)
    by_id = {c.case_id: c for c in suite.cases}
    done = folder.done_case_ids() if resume else set()
    done |= record_unsupported(folder, suite, done)
    todo = [c for c in suite.cases if c.case_id not in done]
    display = RunDisplay(console, total=len(todo), enabled=show_progress, by_id=by_id,
                         row_of=folder.latest_row)
    limit_s = wave_timeout_s(suite.path)
    retries = launch_retries(suite.path)
    next_id = max((l.launch_id for l in suite.launches), default=-1) + 1   # a search's launches come after
    with display:
        total = len(plan_waves(suite.launches))
        for index, wave in pending_waves(suite.launches, done):
            if wave[0].search:   # placement: search: its waves are chosen as it runs
                next_id = _run_search(folder, meta, suite, wave[0], by_id, done, display, index, total,
                                      limit_s, next_id, retries)
                continue
            _run_wave(folder, meta, [(l, [c for c in l.case_ids if c not in done]) for l in wave],
                      by_id, display, index, total, limit_s, retries=retries)
    close_meta(meta)
    merge_rank_records(folder, meta)
    folder.write_meta(meta)
    if finish is not None:
        finish(folder, console)
    return folder.path


def _run_search(folder: RunFolder, meta: dict, suite, launch, by_id: dict, done: set, display, index: int,
                total: int, limit_s: float | None, next_id: int, retries: int) -> int:
    """A placement: search template run wave by wave (search_run.py); returns the next launch id."""
    from ..runfolder.reader import load_samples
    from ..suite import Suite
    from .prepare import write_plan

    templates = [by_id[c] for c in launch.case_ids if c not in done]
    if not templates:
        return next_id
    record: dict = {}
    meta.setdefault("searches", []).append(record)

    def run_one_wave(launches, cases, phase):
        by_id.update({c.case_id: c for c in cases})   # the ranks and the live display look them up
        todo = [(l, [c for c in l.case_ids if c not in done]) for l in launches]
        todo = [(l, p) for l, p in todo if p]
        if not todo:   # a --resume replaying a wave it already ran
            return
        write_plan(folder, Suite(suite.name, suite.path, cases, launches), resume=True)
        display.grow(sum(len(p) for _l, p in todo))   # a search's Cases are made wave by wave
        extra = {"search_wave": cases[0].param("wave"), "search_phase": phase}
        for part in ([todo] if waves_on() else [[job] for job in todo]):   # COMMBENCH_WAVES=0: one by one
            _run_wave(folder, meta, part, by_id, display, index, total, limit_s, extra=extra, retries=retries)

    return run_search(launch, templates, next_id, run_one_wave,
                      lambda ids: [r for r in folder.latest_rows() if r.get("case_id") in ids], record,
                      samples_of=lambda: load_samples(folder.path))


def _run_wave(folder: RunFolder, meta: dict, launches: list, by_id: dict, display, index: int,
              total: int, limit_s: float | None = None, extra: dict | None = None, retries: int = 0) -> None:
    """Run a wave's launches (each with its pending Cases) at the same time; a single launch runs
    alone in this thread, exactly as before waves existed. ``limit_s``: the wave's time limit
    (a launch still running then is killed, its Cases left end as timeout rows). ``retries``: how
    often a launch whose launcher failed before any rank started is started again."""
    deadline = time.time() + limit_s if limit_s else None
    records = []
    for launch, pending in launches:
        record = _launch_record(launch, held_off=not by_id[pending[0]].param("allow_multicast"))
        record["wave"] = index
        record.update(extra or {})
        meta["launches"].append(record)
        records.append(record)
    folder.write_meta(meta)   # recorded as they start: a run killed mid-wave keeps them
    concurrent = len(launches) > 1
    lock = threading.Lock() if concurrent else nullcontext()
    search = (extra or {}).get("search_wave")
    state = WaveState(index=index, total=total, search_wave=search,
                      search_phase=str((extra or {}).get("search_phase", "")))
    cancel = threading.Event()
    shown = (concurrent or search is not None) and hasattr(display, "wave")   # a search's waves: always
    if shown:
        display.wave(state, [l.launch_id for l, _ in launches])
    was_shared = folder.shared
    folder.shared = concurrent or was_shared   # other launches' rank 0s append too: take the writers' lock
    try:
        results = run_wave(
            list(zip(launches, records)),
            lambda job: _run_group(folder, job[0][0], job[0][1], by_id, display, job[1],
                                   lock=lock, cancel=cancel if concurrent else None, deadline=deadline,
                                   retries=retries),
            state=state, key=lambda job: job[0][0].launch_id, cancel=cancel)
    finally:
        folder.shared = was_shared
    if concurrent:   # every launch of the wave has ended: no rank writes the folder now
        folder.keep_samples(folder.done_case_ids())
        folder.rewrite_csv()
    if shown:
        display.wave(None, [])
    merge_rank_records(folder, meta, [launch.launch_id for launch, _pending in launches])
    folder.write_meta(meta)
    errors = [r.error for r in results if r.error is not None]
    if errors:   # StorageFull, an interrupt, a broken folder: the run stops after the whole wave
        raise errors[0]


def _launch_record(launch, held_off: bool) -> dict:
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


def _run_group(folder: RunFolder, launch, pending: list[str], by_id: dict, display,
               record: dict | None = None, lock=None, cancel=None, deadline: float | None = None,
               retries: int = 0) -> dict:
    """Run a launch's pending Cases (relaunching after a timeout or crash); returns its run.json
    entry (``record``, updated in place, when given).

    In a wave of several launches (``cancel`` given) other launches write the folder at the same
    time: this thread's folder calls hold ``lock``, samples are cleaned and the CSV re-mirrored
    once the whole wave ended (by _run_wave)."""
    shared = cancel is not None
    lock = lock if lock is not None else nullcontext()
    if record is None:
        record = _launch_record(launch, held_off=not by_id[pending[0]].param("allow_multicast"))
    log = record["log"]
    progress = folder.path / "logs" / f"launch-{launch.launch_id}.progress.jsonl"
    record["status"] = "ok"   # until a Case of it times out or fails
    attempt = 0
    while pending:
        task = {"launch_id": launch.launch_id, "attempt": attempt, "ranks": launch.ranks,
                "ranks_per_node": launch.ranks_per_node, "case_ids": pending, "log": log,
                "progress": str(progress), "hosts": list(launch.hosts)}
        timeouts = {cid: by_id[cid].timeout_s for cid in pending}
        allow_mc = any(by_id[cid].param("allow_multicast") for cid in pending)
        with lock:
            env = variant_env(folder, launch, [by_id[cid] for cid in pending])
        if shared:   # its rank 0 appends beside the other launches' ones
            env[SHARED_VAR] = "1"
        wave_kw = {"cancel": cancel, "shared": True} if shared else {}   # a launch alone: as before waves
        if deadline is not None:
            wave_kw["deadline"] = deadline
        out, attempt, start_failed = start_until_ranks_run(
            lambda n: run_launch(folder.path, {**task, "attempt": n}, env, timeouts,
                                 on_event=_locked(display.event, lock), allow_multicast=allow_mc,
                                 keep_fds=folder.lock_fds(), **wave_kw),
            folder.path, task, retries, record, note=_locked(console_note(display), lock), deadline=deadline,
            cancel=cancel)
        record["wall_s"] += out.wall_s
        if out.returncode == STORAGE_FULL_EXIT:   # rank 0 could not store a Case: the disk is full
            if not shared:
                folder.rewrite_csv()
            raise StorageFull(f"the disk of {folder.path} is full (rank 0 could not store a Case, log {log}); "
                              f"the run stopped. Every Case stored before is kept and the folder is "
                              f"consistent: free space, then continue with `commbench run SUITE --resume "
                              f"--out {folder.path}`")
        finished = set(out.finished)
        killed = out.timed_out_case or out.crashed_case
        with lock:
            if killed and not shared:   # samples stay only for Cases whose row landed
                folder.keep_samples(folder.done_case_ids())
            done_now = folder.done_case_ids()
        victim = killed
        if victim and victim in done_now:
            finished.add(victim)  # its row landed just before the kill: keep the measurement
            victim = None
        wave_over = deadline is not None and time.time() >= deadline
        if victim:
            status = "timeout" if out.timed_out_case else "failed"
            tail = _log_tail(folder.path / log)
            reason = (f"no progress for {by_id[victim].timeout_s:.0f} s; launch killed, rank stacks in "
                      f"logs/launch-{launch.launch_id}.rank*.stacks.txt"
                      if status == "timeout" else f"ranks exited with status {out.returncode}")
            if status == "timeout" and wave_over:
                reason = (f"{WAVE_LIMIT_REASON}; launch killed, rank stacks in "
                          f"logs/launch-{launch.launch_id}.rank*.stacks.txt")
            reason += on_hosts(folder.path, launch)
            with lock:
                folder.append_row(settled_row(by_id[victim], status, f"{reason} (log {log}): {tail}", log,
                                              launch.ranks))
                display.event({"event": "done", "case_id": victim, "status": status})
            finished.add(victim)
            record.update(status=status, reason=reason)
        elif not killed and (out.returncode != 0 or len(finished) < len(pending)):
            # died before any Case started (bad environment, MPI failure): every pending Case fails
            tail = _log_tail(folder.path / log)
            reason = (f"launch failed with status {out.returncode}{on_hosts(folder.path, launch)} before "
                      f"finishing its Cases (log {log}): {tail}")
            if start_failed is not None:   # no rank ever ran: nothing about the node was measured
                reason = f"{failed_to_start_reason(start_failed)}; launch{on_hosts(folder.path, launch)} (log {log})"
            for cid in pending:
                if cid not in finished:
                    with lock:
                        folder.append_row(settled_row(by_id[cid], "failed", reason, log, launch.ranks))
                        display.event({"event": "done", "case_id": cid, "status": "failed"})
            record.update(status="failed", reason=reason)
            break
        pending = [cid for cid in pending if cid not in finished]
        if wave_over and pending:   # no time left in this wave: its Cases not run end as timeout rows
            reason = f"{WAVE_LIMIT_REASON} before this Case ran{on_hosts(folder.path, launch)} (log {log})"
            for cid in pending:
                with lock:
                    folder.append_row(settled_row(by_id[cid], "timeout", reason, log, launch.ranks))
                    display.event({"event": "done", "case_id": cid, "status": "timeout"})
            record.update(status="timeout", reason=reason)
            break
        attempt += 1
    # rank 0 may have been killed between a row's JSONL line and its CSV line: re-mirror
    if not shared:
        folder.rewrite_csv()
    return record


def _locked(fn, lock):
    def call(*args):
        with lock:
            return fn(*args)
    return call
