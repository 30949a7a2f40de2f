"""`commbench run`: plan a suite, start each launch group, supervise, store, plot, summarise."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from .errors import CommbenchError
from .families.base import Case
from .launch import run_launch
from .results import RunFolder, RunFolderExists, case_row, load, new_run_dir
from .suite import Suite, load_suite
from .world import inside_mpi_job

DEFAULT_RESULTS = Path("results")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _row_for(case: Case, status: str, reason: str, log: str, ranks: int) -> dict:
    """Row for a Case the parent settles itself (skipped before launch, timeout, failed launch)."""
    return case_row(case, world_size=ranks, num_nodes=len(case.hosts) or None,
                    ranks_per_node=case.ranks_per_node, log=log, status=status, reason=reason)


def _log_tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    interesting = [ln for ln in text if ln.strip() and not ln.startswith("===")]
    return " | ".join(interesting[-lines:])[-600:]


def _latest_run_of(suite_name: str) -> Path:
    """The newest run folder under results/ whose run.json names this suite."""
    from .results import load_meta

    runs = []
    for path in DEFAULT_RESULTS.glob(f"*-{suite_name}*"):
        meta = load_meta(path) if path.is_dir() else {}
        if meta.get("suite") == suite_name:
            runs.append((meta.get("started_utc", ""), path.name, path))
    if not runs:
        raise CommbenchError(f"--resume: no earlier run of suite {suite_name!r} under {DEFAULT_RESULTS}/ "
                             f"(name the folder with --out)")
    return max(runs)[2]


def prepare_folder(suite: Suite, out_dir: Path | None, resume: bool) -> RunFolder:
    if out_dir is None:
        if resume:
            out_dir = _latest_run_of(suite.name)
        else:
            out_dir = new_run_dir(DEFAULT_RESULTS, suite.name)
    folder = RunFolder(out_dir)
    try:
        folder.create(resume=resume)
    except RunFolderExists as exc:
        raise CommbenchError(str(exc)) from None
    return folder


def write_plan(folder: RunFolder, suite: Suite, *, resume: bool = False) -> None:
    """plan.json: every Case and launch; a --resume (perhaps with other --only) adds to it."""
    shutil.copyfile(suite.path, folder.path / "suite.yaml")
    cases = {c.case_id: c.to_json() for c in suite.cases}
    launches = {l.launch_id: {"launch_id": l.launch_id, "ranks": l.ranks, "ranks_per_node": l.ranks_per_node,
                              "env": dict(l.env), "variant": l.variant, "case_ids": list(l.case_ids),
                              "hosts": list(l.hosts), "nccl_profile": l.nccl_profile}
                for l in suite.launches}
    path = folder.path / "plan.json"
    if resume and path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = {}
        for item in old.get("cases", []):
            cases.setdefault(item["case_id"], item["case"])
        for item in old.get("launches", []):
            new = launches.setdefault(item["launch_id"], item)
            if new is not item:
                new["case_ids"] = list(dict.fromkeys(item["case_ids"] + new["case_ids"]))
    plan = {"suite": suite.name,
            "cases": [{"case_id": cid, "case": case} for cid, case in cases.items()],
            "launches": [launches[k] for k in sorted(launches)]}
    tmp = folder.path / ".plan.json.tmp"
    tmp.write_text(json.dumps(plan, indent=1))
    os.replace(tmp, path)   # an interrupted write must not lose the earlier plan


def resume_meta(meta: dict, previous: dict, started: str) -> None:
    """run.json of a --resume keeps the first start, adds this one, and keeps earlier launches."""
    meta["launches"] = list(previous.get("launches", []))
    if previous:
        meta["started_utc"] = previous.get("started_utc", started)
        meta["resumed_utc"] = previous.get("resumed_utc", []) + [started]


def overrides_meta(meta: dict, previous: dict, overrides: dict | None) -> None:
    """run.json: this call's `--set`/`--only` as ``overrides``; earlier calls' in ``earlier_overrides``."""
    meta["overrides"] = dict(overrides or {})
    if previous:
        meta["earlier_overrides"] = (list(previous.get("earlier_overrides", []))
                                     + [previous.get("overrides", {})])


def base_meta(suite: Suite, started: str) -> dict:
    from . import sysinfo

    info = sysinfo.collect()
    return {**info, "suite": suite.name, "suite_file": str(suite.path), "started_utc": started,
            "command": sys.argv, "env": sysinfo.filtered_env()}


def run_suite(suite_path: Path, out_dir: Path | None = None, *, resume: bool = False,
              console=None, show_progress: bool = True, overrides: dict | None = None) -> Path:
    """Run every Case of a suite; return the run folder. Used by `run` and `accept`.

    ``overrides`` (`--set key=value`) replace a key in every benchmark; they are recorded."""
    if inside_mpi_job():
        from .inprocess import run_suite_inside_mpi

        return run_suite_inside_mpi(Path(suite_path), out_dir, resume=resume, overrides=overrides)
    from .ui import RunDisplay

    suite = load_suite(suite_path, overrides=overrides)
    folder = prepare_folder(suite, out_dir, resume)
    write_plan(folder, suite, resume=resume)
    started = _now()
    previous = folder.read_meta() if resume else {}
    meta = base_meta(suite, started)
    overrides_meta(meta, previous, overrides)
    resume_meta(meta, previous, started)
    folder.write_meta(meta)
    by_id = {c.case_id: c for c in suite.cases}
    done = folder.done_case_ids() if resume else set()
    done |= _record_unsupported(folder, suite, done)
    todo = [c for c in suite.cases if c.case_id not in done]
    display = RunDisplay(console, total=len(todo), enabled=show_progress, by_id=by_id)
    with display:
        for launch in suite.launches:
            pending = [cid for cid in launch.case_ids if cid not in done]
            if not pending:
                continue
            meta["launches"].append(_run_group(folder, launch, pending, by_id, display))
            folder.write_meta(meta)
    meta["finished_utc"] = _now()
    _merge_hosts(folder, meta)
    folder.write_meta(meta)
    finish(folder, console)
    return folder.path


def _record_unsupported(folder: RunFolder, suite: Suite, done: set[str]) -> set[str]:
    """Cases a family can never run (e.g. multicast blocked by a kill switch) become skipped
    rows here, in the parent, so no process is started for them."""
    from .families import get_family
    from .safety import kill_switch_conflict

    skipped = set()
    for case in suite.cases:
        if case.case_id in done:
            continue
        reason = kill_switch_conflict(case.env_dict) or get_family(case.family).unsupported(case)
        if reason:
            folder.append_row(_row_for(case, "skipped", reason, "", case.ranks))
            skipped.add(case.case_id)
    return skipped


def _run_group(folder: RunFolder, launch, pending: list[str], by_id: dict, display) -> dict:
    log = f"logs/launch-{launch.launch_id}.log"
    progress = folder.path / "logs" / f"launch-{launch.launch_id}.progress.jsonl"
    record = {"launch_id": launch.launch_id, "ranks": launch.ranks, "env": dict(launch.env),
              "hosts": list(launch.hosts),
              "variant": launch.variant, "log": log, "status": "ok", "reason": "", "wall_s": 0.0}
    attempt = 0
    while pending:
        task = {"launch_id": launch.launch_id, "attempt": attempt, "ranks": launch.ranks,
                "ranks_per_node": launch.ranks_per_node, "case_ids": pending, "log": log,
                "progress": str(progress), "hosts": list(launch.hosts)}
        timeouts = {cid: by_id[cid].timeout_s for cid in pending}
        allow_mc = any(by_id[cid].param("allow_multicast") for cid in pending)
        out = run_launch(folder.path, task, {**dict(launch.env), **_profile_env(folder, launch)}, timeouts,
                         on_event=display.event, allow_multicast=allow_mc)
        record["wall_s"] += out.wall_s
        finished = set(out.finished)
        killed = out.timed_out_case or out.crashed_case
        victim = killed
        if victim and victim in folder.done_case_ids():
            finished.add(victim)  # its row landed just before the kill: keep the measurement
            victim = None
        if victim:
            status = "timeout" if out.timed_out_case else "failed"
            tail = _log_tail(folder.path / log)
            reason = (f"no progress for {by_id[victim].timeout_s:.0f} s; launch killed, rank stacks in "
                      f"logs/launch-{launch.launch_id}.rank*.stacks.txt"
                      if status == "timeout" else f"ranks exited with status {out.returncode}")
            folder.append_row(_row_for(by_id[victim], status, f"{reason} (log {log}): {tail}", log, launch.ranks))
            display.event({"event": "done", "case_id": victim, "status": status})
            finished.add(victim)
            record.update(status=status, reason=reason)
        elif not killed and (out.returncode != 0 or len(finished) < len(pending)):
            # died before any Case started (bad environment, MPI failure): every pending Case fails
            tail = _log_tail(folder.path / log)
            reason = f"launch failed with status {out.returncode} before finishing its Cases (log {log}): {tail}"
            for cid in pending:
                if cid not in finished:
                    folder.append_row(_row_for(by_id[cid], "failed", reason, log, launch.ranks))
                    display.event({"event": "done", "case_id": cid, "status": "failed"})
            record.update(status="failed", reason=reason)
            break
        pending = [cid for cid in pending if cid not in finished]
        attempt += 1
    # rank 0 may have been killed between a row's JSONL line and its CSV line: re-mirror
    folder.rewrite_csv()
    return record


def _profile_env(folder: RunFolder, launch) -> dict[str, str]:
    """Variables that make the launch's NCCL load commbench's profiler plugin (nccl-profiled Cases)."""
    if not getattr(launch, "nccl_profile", False):
        return {}
    from .profile.nccl_plugin import launch_env

    return launch_env(folder.path)


def _merge_hosts(folder: RunFolder, meta: dict) -> None:
    hosts, seen = set(), {}
    for p in sorted((folder.path / "logs").glob("launch-*.hosts.json")):
        try:
            info = json.loads(p.read_text())
            hosts.update(info["hosts"])
        except (ValueError, KeyError, TypeError):
            continue
        if "kill_switches_seen" in info:  # what each rank saw, per launch (DESIGN section 7)
            seen[p.name.split(".")[0]] = info["kill_switches_seen"]
    if hosts:
        meta["hosts"] = sorted(hosts)
    if seen:
        meta["kill_switches_seen_by_ranks"] = seen


def finish(folder: RunFolder, console) -> None:
    """Plots and the end-of-run summary (only from stored rows)."""
    from .ui import print_summary

    try:
        df = load(folder.path)
    except FileNotFoundError:
        df = None
    plots = []
    if df is not None and len(df):
        try:
            from .report.plots import write_run_plots

            plots = write_run_plots(df, folder.path / "plots")
        except ImportError:
            plots = []
    print_summary(console, df, folder.path, plots)
    if df is not None and len(df):
        from .report.build import write_report

        html_path, md_path = write_report([folder.path])
        (console or _stderr_console()).print(f"report:  {html_path} (and {md_path.name})")


def _stderr_console():
    from rich.console import Console

    return Console()
