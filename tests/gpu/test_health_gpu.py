"""The GPU health record read from the real cards through NVML (nvidia-ml-py): every field present as
a value or as "not available: <NVML's reason>"; the event watch starts and stops on the real driver;
a real `commbench run` stores start and end records per GPU in health.jsonl.

    HEALTH_RECORD_DIR=$OUT python3 -m pytest -q tests/gpu/test_health_gpu.py

With HEALTH_RECORD_DIR set, the records read and a snapshot in the stand-in's format
(tests/fixtures/fake_nvml/pynvml.py: ``record_snapshot``) are written there, to be committed as
fixtures (tests/fixtures/nvml/<card>-recorded.json)."""
import importlib.util
import json
import os
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.sysinfo import health
from commbench.sysinfo.health_watch import HealthWatch
from tests.conftest import needs_gpu, needs_mpi

pytestmark = [pytest.mark.gpu, needs_gpu,
              pytest.mark.skipif(importlib.util.find_spec("pynvml") is None,
                                 reason="nvidia-ml-py is not installed: bring its wheel in .whl/ (tests/gpu/env.sh)")]
ROOT = Path(__file__).resolve().parents[2]
COUNTERS = ["ecc.mode", "ecc.volatile_sbe", "ecc.volatile_dbe", "ecc.aggregate_sbe", "ecc.aggregate_dbe",
            "remapped_rows", "retired_pages", "throttle_ns.sw_power_cap", "throttle_ns.sync_boost",
            "throttle_ns.sw_thermal", "throttle_ns.hw_thermal", "throttle_ns.hw_power_brake",
            "clock_event_reasons", "pcie.gen", "pcie.gen_max", "pcie.gen_gpu_max", "pcie.width", "pcie.width_max",
            "pcie.replay_counter", "nvlink", "temperature_c", "power_w", "power_limit_w", "energy_j",
            "clocks_mhz.sm", "clocks_mhz.mem", "clocks_mhz.sm_max", "clocks_mhz.mem_max"]


def _get(rec: dict, path: str):
    for part in path.split("."):
        assert isinstance(rec, dict) and part in rec, f"{path} missing from {json.dumps(rec)[:400]}"
        rec = rec[part]
    return rec


def _keep(name: str, data) -> None:
    out = os.environ.get("HEALTH_RECORD_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / name).write_text(json.dumps(data, indent=1, sort_keys=True))


def test_every_field_of_every_gpu_is_a_value_or_not_available_with_a_reason():
    nvml = health.open_nvml()
    assert nvml, nvml.missing
    recs = health.node_records(nvml, "start")
    _keep("health-records.json", recs)
    spec = importlib.util.spec_from_file_location("fake_pynvml", ROOT / "tests/fixtures/fake_nvml/pynvml.py")
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    _keep("nvml-snapshot.json", fake.record_snapshot(nvml.nv))
    nvml.shutdown()
    assert recs and all(r["nvml"] == "ok" and isinstance(r["gpu"], int) for r in recs), recs
    for r in recs:
        assert r["name"] and str(r["uuid"]).startswith("GPU-") and r["pci_bus_id"]
        for path in COUNTERS:
            value = _get(r, path)
            if isinstance(value, str) and value.startswith("not available"):
                assert len(value) > len("not available: "), f"{path}: no reason given"
            else:
                assert value is not None and value != "", path
        pcie = r["pcie"]
        for now, top in (("gen", "gen_max"), ("width", "width_max")):
            if all(isinstance(pcie[k], int) for k in (now, top)):
                assert 1 <= pcie[now] <= pcie[top], pcie
        assert isinstance(r["ecc"]["volatile_dbe"], int) or r["ecc"]["mode"] != "enabled", r["ecc"]
        print(f"GPU {r['gpu']} {r['name']}: PCIe Gen{pcie['gen']}/{pcie['gen_max']} x{pcie['width']}/"
              f"{pcie['width_max']}, ECC {r['ecc']}, rows {r['remapped_rows']}, pages {r['retired_pages']}, "
              f"throttle {r['throttle_ns']}, nvlink {str(r['nvlink'])[:80]}")


def test_the_event_watch_registers_on_the_real_driver_and_stops_within_a_second():
    nvml = health.open_nvml()
    gpus = health.handles(nvml)
    got = []
    watch = HealthWatch(nvml, gpus, got.append, period_s=0.2).start()
    time.sleep(1.0)
    t0 = time.monotonic()
    watch.stop()
    assert time.monotonic() - t0 < 1.0
    nvml.shutdown()
    print(f"watched: {watch.watched}; events: {got}; errors: {watch.errors}; seen: {watch.seen()}")
    assert set(watch.watched) == {i for i, _h in gpus}
    for value in watch.watched.values():
        assert (isinstance(value, list) and "xid" in value) or str(value).startswith("not available: "), value
    assert not watch.errors and all(s["samples"] >= 3 for s in watch.seen().values())


@needs_mpi
def test_a_gpu_run_stores_start_and_end_records_per_gpu(tmp_path):
    suite = tmp_path / "h.yaml"
    suite.write_text(textwrap.dedent("""\
        name: health-gpu
        defaults: {ranks: 1, warmup: 2, iters: 20, sizes: [64MiB]}
        benchmarks:
          - {name: ar, family: collectives, ops: [all_reduce], backends: [nccl]}
        """))
    out = tmp_path / "run"
    res = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    recs = [json.loads(line) for line in (out / "health.jsonl").read_text().splitlines()]
    _keep("run-health.jsonl.json", recs)
    starts = [r for r in recs if r["phase"] == "start"]
    ends = [r for r in recs if r["phase"] == "end"]
    assert starts and len(starts) == len(ends) and all(r["nvml"] == "ok" for r in starts + ends)
    for end in ends:
        assert end["during"]["samples"] >= 1 and "events_watched" in end
        assert end["t"] > starts[0]["t"]
    report = CliRunner().invoke(cli, ["report", str(out), "--out", str(tmp_path / "r.html")])
    assert report.exit_code == 0 and "## GPU health" in (tmp_path / "r.md").read_text()
    accept_rules = tmp_path / "rules.yaml"
    accept_rules.write_text("rules:\n  health: true\n  checks:\n    - {name: ran, select: {bench: ar}, "
                            "metric: time_us, aggregate: max, op: '<=', value: 1e9}\n")
    res = CliRunner().invoke(cli, ["accept", str(out), "--rules", str(accept_rules)])
    print(res.output)
    assert "GPU(s) on 1 node(s) judged" in res.output
