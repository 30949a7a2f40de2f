"""What the ranks of each launch recorded about themselves (logs/launch-N.hosts.json: their hosts
and the kill switches they saw; logs/launch-N.gpus.json: how they shared GPUs), merged into
run.json as waves end."""
from __future__ import annotations

import json
from pathlib import Path


def merge_rank_records(folder, meta: dict, launch_ids=None) -> None:
    """Merge what the ranks recorded (logs/launch-N.hosts.json, .gpus.json) into run.json's
    hosts, kill_switches_seen_by_ranks and gpu_binding. ``launch_ids``: only those launches' files
    (a wave's), so a run of many waves reads each file once, not every earlier one again at each
    wave; None: every launch's (once, as the run ends)."""
    logs = folder.path / "logs"
    if launch_ids is None:
        launch_ids = sorted({p.name.split(".")[0][len("launch-"):] for pattern in ("hosts", "gpus")
                             for p in logs.glob(f"launch-*.{pattern}.json")})
    hosts, seen, sharing = set(meta.get("hosts") or ()), {}, {}
    for lid in launch_ids:
        name = f"launch-{lid}"
        info = _json_of(logs / f"{name}.hosts.json")
        if isinstance(info, dict) and isinstance(info.get("hosts"), list):
            hosts.update(map(str, info["hosts"]))
            if "kill_switches_seen" in info:  # what each rank saw, per launch (DESIGN section 7)
                seen[name] = info["kill_switches_seen"]
        binding = _json_of(logs / f"{name}.gpus.json")
        if binding is not None:   # per launch: ranks per GPU and the NCCL host identity of each sharing rank
            sharing[name] = binding
    if hosts:
        meta["hosts"] = sorted(hosts)
    if seen:
        meta["kill_switches_seen_by_ranks"] = {**meta.get("kill_switches_seen_by_ranks", {}), **seen}
    if sharing:
        meta["gpu_binding"] = {**meta.get("gpu_binding", {}), **sharing}


def _json_of(path: Path):
    """A rank's small JSON record (None when it is missing or damaged: the run goes on without it)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
