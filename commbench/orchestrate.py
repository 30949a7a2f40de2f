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
                              "hosts": list(l.hosts)}
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
        out = run_launch(folder.path, task, dict(launch.env), timeouts, on_event=display.event,
                         allow_multicast=allow_mc)
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
            reason += _on_hosts(folder, launch)
            folder.append_row(_row_for(by_id[victim], status, f"{reason} (log {log}): {tail}", log, launch.ranks))
            display.event({"event": "done", "case_id": victim, "status": status})
            finished.add(victim)
            record.update(status=status, reason=reason)
        elif not killed and (out.returncode != 0 or len(finished) < len(pending)):
            # died before any Case started (bad environment, MPI failure): every pending Case fails
            tail = _log_tail(folder.path / log)
            reason = (f"launch failed with status {out.returncode}{_on_hosts(folder, launch)} before finishing "
                      f"its Cases (log {log}): {tail}")
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


def run_exit_status(run_dir: Path) -> tuple[int, str]:
    """(exit status, why) of a finished run (DESIGN section 6): 1 when a row is wrong, failed or
    timed out, or nothing was stored; 0 otherwise (skipped rows say why in their reason)."""
    try:
        df = load(run_dir)
    except FileNotFoundError:
        return 1, "nothing measured"
    if df is None or not len(df):
        return 1, "nothing measured"
    wrong = df["wrong"].fillna(0) > 0 if "wrong" in df.columns else False
    bad = df["status"].isin(["wrong", "failed", "timeout"]) | wrong
    if bad.any():
        counts = df.loc[bad, "status"].value_counts()
        return 1, ", ".join(f"{n} {s}" for s, n in counts.items()) + " row(s) (see results.csv)"
    return 0, ""


def _on_hosts(folder: RunFolder, launch) -> str:
    """' on hosts a,b' for a failure's reason: the placement's hosts, else those the ranks reported
    (a dead or unreachable node is named in the row, not only in the log)."""
    hosts = list(launch.hosts)
    if not hosts:
        try:
            ranks_hosts = json.loads((folder.path / "logs" / f"launch-{launch.launch_id}.hosts.json").read_text())
            hosts = sorted(set(ranks_hosts["hosts"]))
        except (OSError, ValueError, KeyError):
            return ""
    where = f" on host{'s' if len(hosts) > 1 else ''} {','.join(hosts)}"
    lost = _hosts_the_launcher_lost(folder.path / f"logs/launch-{launch.launch_id}.log", hosts)
    return f"{where} (lost {','.join(lost)})" if lost and len(hosts) > 1 else where


# How Open MPI (orte and prrte) and ssh name a node they could not start or lost.
_LOST_PATTERNS = (r"Remote host:\s+{h}\b", r"Remote daemon:.* on node {h}\b", r"connect to host {h}\b",
                  r"resolve hostname {h}\b")


def _hosts_the_launcher_lost(log: Path, hosts: list[str]) -> list[str]:
    """The hosts that the last attempt's launcher output names as lost or unreachable."""
    import re

    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    last = text[text.rfind("=== launch"):]
    return [h for h in hosts if any(re.search(p.format(h=re.escape(h)), last) for p in _LOST_PATTERNS)]


def _merge_hosts(folder: RunFolder, meta: dict) -> None:
    hosts = set()
    for p in (folder.path / "logs").glob("launch-*.hosts.json"):
        try:
            hosts.update(json.loads(p.read_text())["hosts"])
        except (ValueError, KeyError):
            continue
    if hosts:
        meta["hosts"] = sorted(hosts)


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
