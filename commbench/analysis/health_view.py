"""The GPU health of a run, launch by launch (health.jsonl, docs/results.md): each GPU's start and end
records joined, the deltas from start to end, and the events in between. The report's health
section and accept's health rules (analysis/accept/health_rules.py) both read this.

A counter that was "not available" at either end stays so in the delta (with the reason), never 0.
"""
from __future__ import annotations

from pathlib import Path

from ..runfolder.health_files import load_health
from ..sysinfo.health import is_available
# the records' judgement is pure and sits low (sysinfo/health_judge.py) so the search can use it too
from ..sysinfo.health_judge import GpuLaunch, RunHealth, delta, dig, group_records, seen_max

__all__ = ["GpuLaunch", "RunHealth", "delta", "dig", "seen_max", "run_health", "nvlink_errors", "links_down",
           "unavailable_counters"]


def run_health(run_dir: Path, warn=None) -> RunHealth:
    """The run's health records, grouped per (launch, attempt, host, GPU)."""
    return group_records(load_health(Path(run_dir), warn))


def nvlink_errors(g: GpuLaunch):
    """{link: {counter: new errors}} of links whose counters grew; "not available" without NVLink."""
    start, end = dig(g.start, "nvlink"), dig(g.end, "nvlink")
    if not isinstance(end, list) or not isinstance(start, list):
        return end if not is_available(end) else start
    before = {e.get("link"): e for e in start if isinstance(e, dict)}
    out = {}
    for e in end:
        if not isinstance(e, dict):
            continue
        b = before.get(e.get("link"), {})
        grew = {k: e[k] - b[k] for k in ("crc_flit", "crc_data", "replay", "recovery")
                if isinstance(e.get(k), int) and isinstance(b.get(k), int) and e[k] > b[k]}
        if grew:
            out[e.get("link")] = grew
    return out


def links_down(g: GpuLaunch) -> list[int]:
    end = dig(g.end or g.start, "nvlink")
    if not isinstance(end, list):
        return []
    return [e.get("link") for e in end if isinstance(e, dict) and e.get("state") == "down"]


def unavailable_counters(g: GpuLaunch) -> dict[str, str]:
    """Every counter of the GPU's latest record that was "not available", with the reason."""
    out: dict[str, str] = {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        elif not is_available(value):
            out[prefix] = value

    walk("", {k: v for k, v in (g.end or g.start or {}).items() if k not in ("nvml",)})
    return out
