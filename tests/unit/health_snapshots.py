"""Helpers of the health tests: NVML snapshots (tests/fixtures/nvml) through the stand-in pynvml
(tests/fixtures/fake_nvml/pynvml.py), and health.jsonl written by the real writer from them."""
from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE_DIR = ROOT / "tests" / "fixtures" / "fake_nvml"
H100 = ROOT / "tests" / "fixtures" / "nvml" / "h100-modelled.json"


def base_gpu() -> dict:
    return copy.deepcopy(json.loads(H100.read_text())["hosts"]["*"]["gpus"][0])


def gpu(**changes) -> dict:
    """The modelled H100 with ``changes`` (a dict value updates that part: pcie={"gen": 3})."""
    g = base_gpu()
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(g.get(key), dict):
            g[key].update(value)
        else:
            g[key] = value
    return g


def snapshot(gpus: list[dict], events: list | None = None, then: dict | None = None, host: str = "*") -> dict:
    return {"driver": "580.159.04", "hosts": {host: {"gpus": gpus, "events": events or [], "then": then or {}}}}


def fake_pynvml(monkeypatch, snap: dict | None = None, host: str | None = None):
    """The stand-in loaded as ``pynvml`` for this test (``snap`` None: no driver answers)."""
    monkeypatch.delenv("COMMBENCH_FAKE_NVML", raising=False)
    spec = importlib.util.spec_from_file_location("pynvml", FAKE_DIR / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if snap is not None:
        module.load(snap, host)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def write_launch(monkeypatch, run_dir: Path, host: str, snap: dict, launch_id: int = 0, seconds: float = 60.0) -> None:
    """health.jsonl lines of one launch on ``host`` as the rank side writes them: start records, the
    snapshot's events through the real watch's delivery, end records ``seconds`` later."""
    from commbench.runfolder.health_files import append_health
    from commbench.sysinfo import health
    from commbench.sysinfo.health_watch import HealthWatch

    fake = fake_pynvml(monkeypatch, snap)
    tags = {"launch_id": launch_id, "attempt": 0, "node_ranks": 2}
    nvml = health.open_nvml()
    start = health.node_records(nvml, "start", host)
    append_health(run_dir, [{**r, **tags} for r in start])
    stored = []
    watch = HealthWatch(nvml, health.handles(nvml), stored.append) if nvml else None
    if watch is not None:
        watch._register()
        while fake._state["events"] or not fake._state["advanced"]:
            watch._wait(1)
        watch._sample()
        append_health(run_dir, [{**health.header("event", host), **e, **tags} for e in stored])
    end = health.node_records(nvml, "end", host)
    for rec in end:
        rec["t"] = start[0]["t"] + seconds
        if watch is not None and rec.get("gpu") is not None:
            rec["during"] = watch.seen()[rec["gpu"]]
    append_health(run_dir, [{**r, **tags} for r in end])
    nvml.shutdown()
