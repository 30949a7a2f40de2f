"""The GPU health of a run, launch by launch (health.jsonl, docs/results.md): each GPU's start and end
records joined, the deltas from start to end, and the events in between. The report's health
section and accept's health rules (analysis/accept/health_rules.py) both read this.

A counter that was "not available" at either end stays so in the delta (with the reason), never 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..runfolder.health_files import load_health
from ..sysinfo.health import is_available, not_available


@dataclass
class GpuLaunch:
    """One GPU of one node over one launch (attempt)."""

    launch_id: int
    attempt: int
    host: str
    gpu: int
    start: dict | None = None
    end: dict | None = None
    events: list = field(default_factory=list)

    @property
    def name(self) -> str:
        rec = self.end or self.start or {}
        return str(rec.get("name", ""))

    @property
    def duration_s(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return max(0.0, float(self.end["t"]) - float(self.start["t"]))

    def xids(self) -> list[int]:
        return [int(e["xid"]) for e in self.events if e.get("event") == "xid" and isinstance(e.get("xid"), int)]


@dataclass
class RunHealth:
    gpus: list[GpuLaunch]
    no_nvml: dict[str, str]          # host -> why its records hold no GPU
    hosts: list[str]

    @property
    def judged(self) -> bool:
        return bool(self.gpus)


def run_health(run_dir: Path, warn=None) -> RunHealth:
    """The run's health records, grouped per (launch, attempt, host, GPU)."""
    by_key: dict[tuple, GpuLaunch] = {}
    no_nvml: dict[str, str] = {}
    hosts: list[str] = []
    for rec in load_health(Path(run_dir), warn):
        host = rec["host"]
        if host not in hosts:
            hosts.append(host)
        if rec.get("gpu") is None:
            if rec["phase"] != "event":
                no_nvml[host] = str(rec.get("nvml", not_available("no GPU in the record")))
            continue
        key = (rec["launch_id"], rec["attempt"], host, rec["gpu"])
        item = by_key.setdefault(key, GpuLaunch(*key))
        if rec["phase"] == "event":
            item.events.append(rec)
        else:
            setattr(item, rec["phase"], rec)   # a repeated phase (never written twice) keeps the last
    gpus = sorted(by_key.values(), key=lambda g: (g.host, g.launch_id, g.attempt, g.gpu))
    for g in gpus:
        no_nvml.pop(g.host, None)
    return RunHealth(gpus, no_nvml, hosts)


def dig(rec: dict | None, path: str):
    """rec['a']['b'] for path 'a.b'; "not available: ..." where the record or a level is missing."""
    if rec is None:
        return not_available("no record")
    value = rec
    for part in path.split("."):
        if not isinstance(value, dict):
            return value if not is_available(value) else not_available(f"{path} is not in the record")
        value = value.get(part, not_available(f"{path} is not in the record"))
    return value


def delta(g: GpuLaunch, path: str):
    """end - start of a counter, or "not available: ..." (the first end that lacks it, with why)."""
    if g.end is None:
        return not_available("no end record (the launch ended before its end was taken)")
    a, b = dig(g.start, path), dig(g.end, path)
    for v in (a, b):
        if not is_available(v):
            return v
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return not_available(f"{path} is not a number")
    return b - a


def seen_max(g: GpuLaunch, key: str, during_key: str):
    """The highest value of pcie.<key> over start, end and the samples in between."""
    values = [dig(r, f"pcie.{key}") for r in (g.start, g.end) if r is not None]
    values.append(dig(g.end, f"during.{during_key}") if g.end is not None else not_available("no end record"))
    numbers = [v for v in values if is_available(v) and isinstance(v, (int, float))]
    if numbers:
        return max(numbers)
    return next((v for v in values if not is_available(v)), not_available("no record"))


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
