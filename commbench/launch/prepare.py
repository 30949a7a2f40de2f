"""What both ways of running a suite share (commbench's own launches, or ranks of an outer
MPI job): the run folder, plan.json, run.json and the rows the parent settles without measuring."""
from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from ..errors import CommbenchError
from ..families.base import Case
from ..runfolder import RunFolder, RunFolderError, RunFolderExists, case_row, new_run_dir, read_meta
from ..runfolder.writer import atomic_write, folder_name_part
from ..suite import Suite
from .plan_env import stored_case, stored_env

DEFAULT_RESULTS = Path("results")


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def settled_row(case: Case, status: str, reason: str, log: str, ranks: int, attempt: int | None = None) -> dict:
    """Row for a Case the parent settles itself (skipped before launch, timeout, failed launch);
    ``attempt``: the launch attempt it settles (the `attempt` column)."""
    return case_row(case, world_size=ranks, num_nodes=len(case.hosts) or None,
                    ranks_per_node=case.ranks_per_node, log=log, status=status, reason=reason, attempt=attempt)


def _latest_run_of(suite_name: str) -> Path:
    """The newest run folder under results/ whose run.json names this suite."""
    runs = []
    for path in DEFAULT_RESULTS.glob(f"*-{folder_name_part(suite_name)}*"):
        try:
            meta = read_meta(path) if path.is_dir() else {}
        except RunFolderError:
            continue   # an unreadable run.json is not the run to resume
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
        folder.claim(resume=resume)   # the one writer of this folder until the run ends
    except RunFolderExists as exc:
        raise CommbenchError(str(exc)) from None
    if resume:
        folder.repair()   # what a crash or a full disk left half done
    return folder


def write_plan(folder: RunFolder, suite: Suite, *, resume: bool = False) -> None:
    """plan.json: every Case and launch; a --resume (perhaps with other --only) adds to it."""
    copy = folder.path / "suite.yaml"
    if not (copy.exists() and os.path.samefile(suite.path, copy)):   # `--resume RUN/suite.yaml`
        atomic_write(copy, Path(suite.path).read_bytes())
    cases = {c.case_id: stored_case(c) for c in suite.cases}   # secret env values withheld (plan_env)
    launches = {l.launch_id: {"launch_id": l.launch_id, "ranks": l.ranks, "ranks_per_node": l.ranks_per_node,
                              "env": dict(stored_env(l.env)), "variant": l.variant, "case_ids": list(l.case_ids),
                              "hosts": list(l.hosts), "nccl_profile": l.nccl_profile}
                for l in suite.launches}
    path = folder.path / "plan.json"
    if resume and path.exists():
        for item in _earlier_plan(path, "cases", ("case_id", "case")):
            cases.setdefault(item["case_id"], item["case"])
        for item in _earlier_plan(path, "launches", ("launch_id", "case_ids")):
            new = launches.setdefault(item["launch_id"], item)
            if new is not item and isinstance(item["case_ids"], list):
                new["case_ids"] = list(dict.fromkeys(item["case_ids"] + new["case_ids"]))
    plan = {"suite": suite.name,
            "cases": [{"case_id": cid, "case": case} for cid, case in cases.items()],
            "launches": [launches[k] for k in sorted(launches)]}
    atomic_write(path, json.dumps(plan, indent=1).encode())   # an interrupted write keeps the earlier plan


def _earlier_plan(path: Path, key: str, fields: tuple[str, ...]) -> list[dict]:
    """The entries of an earlier plan.json worth keeping (a damaged file keeps nothing)."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return []
    items = old.get(key) if isinstance(old, dict) else None
    return [i for i in items if isinstance(i, dict) and all(f in i for f in fields)
            and isinstance(i[fields[0]], (str, int))] if isinstance(items, list) else []


def _list(value) -> list:
    """A list kept from an earlier run.json (anything else there is dropped, not trusted)."""
    return list(value) if isinstance(value, list) else []


def resume_meta(meta: dict, previous: dict, started: str) -> None:
    """run.json of a --resume keeps the first start, adds this one, and keeps earlier launches."""
    meta["launches"] = _list(previous.get("launches"))
    if previous:
        meta["started_utc"] = previous.get("started_utc", started)
        meta["resumed_utc"] = _list(previous.get("resumed_utc")) + [started]


def overrides_meta(meta: dict, previous: dict, overrides: dict | None) -> None:
    """run.json: this call's `--set`/`--only` as ``overrides``; earlier calls' in ``earlier_overrides``."""
    meta["overrides"] = dict(overrides or {})
    if previous:
        meta["earlier_overrides"] = (_list(previous.get("earlier_overrides"))
                                     + [previous.get("overrides", {})])


def param_columns_meta(meta: dict, previous: dict, suite: Suite) -> None:
    """run.json's ``param_columns``: per family of the suite, its Params (the row columns that are
    parameters), so readers never import the families; a --resume keeps earlier calls' families."""
    from ..families import get_family

    earlier = previous.get("param_columns")
    columns = dict(earlier) if isinstance(earlier, dict) else {}
    for name in sorted({c.family for c in suite.cases}):
        columns[name] = list(get_family(name).params)
    meta["param_columns"] = columns


def base_meta(suite: Suite, started: str) -> dict:
    from ..sysinfo import machine
    from .resume_guard import file_sha256

    info = machine.collect()
    return {**info, "suite": suite.name, "suite_file": str(suite.path), "suite_sha256": file_sha256(suite.path),
            "started_utc": started, "command": sys.argv, "env": machine.filtered_env(),
            "env_withheld": machine.withheld_env()}   # names only: they look like credentials


def open_meta(folder: RunFolder, suite: Suite, *, resume: bool, overrides: dict | None, force: bool,
              own_ranks: int) -> dict:
    """run.json at the start of a run: refuses a --resume whose settings differ (unless ``force``),
    writes plan.json and the suite copy, records overrides, resumes and the machine's load."""
    from ..sysinfo.load import snapshot
    from .resume_guard import guard

    started = now_utc()
    previous = folder.read_meta() if resume else {}
    forced = (guard(folder.path, previous, suite.path, overrides, force, started, suite.name)
              if previous else None)
    write_plan(folder, suite, resume=resume)
    meta = base_meta(suite, started)
    param_columns_meta(meta, previous, suite)
    overrides_meta(meta, previous, overrides)
    resume_meta(meta, previous, started)
    if previous.get("forced_resumes") or forced:
        meta["forced_resumes"] = list(previous.get("forced_resumes", [])) + ([forced] if forced else [])
    meta["machine_load"] = {"before": snapshot(), "own_ranks": own_ranks}
    return meta


def close_meta(meta: dict, exclude_pids: set[int] | None = None) -> None:
    """run.json at the end: the finish time and the machine's load after the run."""
    from ..sysinfo.load import snapshot

    meta["finished_utc"] = now_utc()
    meta.setdefault("machine_load", {})["after"] = snapshot(exclude_pids)


def record_unsupported(folder: RunFolder, suite: Suite, done: set[str]) -> set[str]:
    """Cases a family can never run (e.g. multicast blocked by a kill switch) become skipped
    rows here, in the parent, so no process is started for them."""
    from ..families import get_family
    from ..safety import kill_switch_conflict

    skipped = set()
    for case in suite.cases:
        if case.case_id in done:
            continue
        reason = kill_switch_conflict(case.env_dict) or get_family(case.family).unsupported(case)
        if reason:
            folder.append_row(settled_row(case, "skipped", reason, "", case.ranks))
            skipped.add(case.case_id)
    return skipped


def variant_env(folder: RunFolder, launch, cases: list[Case]) -> dict[str, str]:
    """What a launch sets over the parent's environment: its Cases' env, NCCL profiling's variables,
    and what the Cases' families need from process start (``Family.launch_env``; a family never
    writes ``os.environ`` itself)."""
    from ..suite.launches import declared_env

    env = {**dict(launch.env), **profile_env(folder, launch)}
    return {**env, **declared_env(cases, {**os.environ, **env}, folder.path / "logs")}


def profile_env(folder: RunFolder, launch) -> dict[str, str]:
    """Variables that make a launch's NCCL load commbench's profiler plugin (nccl-profiled Cases)."""
    if not getattr(launch, "nccl_profile", False):
        return {}
    from ..profile.nccl_plugin import launch_env

    return launch_env(folder.path)
