"""The GPU health record read through NVML (commbench/sysinfo/health.py, health_watch.py), fed by the
stand-in pynvml from recorded-format snapshots; health.jsonl written and read back
(runfolder/health_files.py); start-to-end deltas (analysis/health_view.py)."""
from __future__ import annotations

import sys
import time

import pytest

from commbench.errors import RunFolderError
from commbench.runfolder.health_files import HEALTH, append_health, load_health
from commbench.sysinfo import health
from commbench.sysinfo.health_watch import HealthWatch
from tests.unit.health_snapshots import fake_pynvml, gpu, snapshot, write_launch


def test_every_counter_of_a_modelled_h100_is_read_and_what_the_card_lacks_says_why(monkeypatch):
    fake_pynvml(monkeypatch, snapshot([gpu(), gpu(pci_bus_id="00000000:2A:00.0")]))
    nvml = health.open_nvml()
    recs = health.node_records(nvml, "start", "n1")
    assert [r["gpu"] for r in recs] == [0, 1] and {r["host"] for r in recs} == {"n1"}
    r = recs[0]
    assert r["nvml"] == "ok" and r["driver"] == "580.159.04" and r["name"] == "NVIDIA H100 80GB HBM3"
    assert r["ecc"] == {"mode": "enabled", "volatile_sbe": 0, "volatile_dbe": 0, "aggregate_sbe": 2,
                        "aggregate_dbe": 0}
    assert r["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert r["retired_pages"] == "not available: Not Supported"   # row remapping replaces it on H100
    assert r["nvlink"] == "not available: Not Supported"
    assert r["throttle_ns"]["sw_power_cap"] == 1_200_000_000 and r["throttle_ns"]["hw_thermal"] == 0
    assert r["clock_event_reasons"] == ["gpu_idle"]
    assert r["pcie"] == {"gen": 5, "gen_max": 5, "gen_gpu_max": 5, "width": 16, "width_max": 16, "replay_counter": 0}
    assert r["power_w"] == 71.0 and r["power_limit_w"] == 700.0 and r["temperature_c"] == 33
    assert r["clocks_mhz"]["sm_max"] == 1980 and recs[1]["pci_bus_id"] == "00000000:2A:00.0"
    nvml.shutdown()


def test_a_counter_the_driver_refuses_is_not_available_with_its_reason_never_zero(monkeypatch):
    g = gpu(ecc={"volatile_dbe": "Not Supported", "aggregate_dbe": "Insufficient Permissions"},
            remapped_rows="Not Supported",
            fields={"NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN": "Not Supported"},
            pcie={"replay_counter": "Function Not Found"})
    fake_pynvml(monkeypatch, snapshot([g]))
    [r] = health.node_records(health.open_nvml(), "start")
    assert r["ecc"]["volatile_dbe"] == "not available: Not Supported"
    assert r["ecc"]["aggregate_dbe"] == "not available: Insufficient Permissions"
    assert r["remapped_rows"] == "not available: Not Supported"
    assert r["throttle_ns"]["hw_power_brake"] == "not available: Not Supported"
    assert r["pcie"]["replay_counter"] == "not available: Function Not Found"
    assert r["ecc"]["volatile_sbe"] == 0   # what the card has is still read


def test_nvlink_links_are_read_one_by_one_up_to_the_last(monkeypatch):
    links = [{"state": 1, "replay": 0, "recovery": 0, "crc_flit": 3, "crc_data": 0},
             {"state": 0, "replay": 1, "recovery": 2, "crc_flit": 0, "crc_data": "Not Supported"}]
    fake_pynvml(monkeypatch, snapshot([gpu(nvlink=links)]))
    [r] = health.node_records(health.open_nvml(), "start")
    assert r["nvlink"] == [{"link": 0, "state": "up", "replay": 0, "recovery": 0, "crc_flit": 3, "crc_data": 0},
                           {"link": 1, "state": "down", "replay": 1, "recovery": 2, "crc_flit": 0,
                            "crc_data": "not available: Not Supported"}]


def test_without_nvidia_ml_py_or_a_driver_the_node_record_says_no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)   # import pynvml raises ImportError
    [r] = health.node_records(health.open_nvml(), "start", "cpu1")
    assert r["gpu"] is None and r["nvml"].startswith("not available: no NVML (nvidia-ml-py is not installed")
    fake = fake_pynvml(monkeypatch, snapshot([gpu()]))
    fake._state["snap"]["init_error"] = "Driver Not Loaded"
    [r] = health.node_records(health.open_nvml(), "start", "cpu1")
    assert r["nvml"] == "not available: no NVML (Driver Not Loaded)"


def test_the_watch_delivers_xid_and_ecc_events_in_its_own_thread_and_stops_at_once(monkeypatch):
    snap = snapshot([gpu(), gpu()], events=[{"gpu": 1, "type": "xid", "data": 79},
                                            {"gpu": 0, "type": "double_bit_ecc", "data": 0}],
                    then={"0": {"pcie": {"gen": 5}}})
    fake = fake_pynvml(monkeypatch, snap)
    fake._state["snap"]["gpus"][0]["pcie"]["gen"] = 1   # idle: the link runs slower until work comes
    nvml = health.open_nvml()
    got = []
    watch = HealthWatch(nvml, health.handles(nvml), got.append, period_s=0.05).start()
    deadline = time.time() + 5
    while len(got) < 2 and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.15)
    t0 = time.monotonic()
    watch.stop()
    assert time.monotonic() - t0 < 1.0
    assert [(e["gpu"], e["event"], e.get("xid")) for e in got] == [(1, "xid", 79), (0, "double_bit_ecc", None)]
    assert watch.watched[0] == ["single_bit_ecc", "double_bit_ecc", "xid", "dram_retirement"]
    seen = watch.seen()
    assert seen[0]["pcie_gen_max"] == 5 and seen[0]["samples"] >= 2 and seen[1]["temperature_c_max"] == 33


def test_health_jsonl_round_trip_and_what_its_reader_refuses(tmp_path, monkeypatch):
    (tmp_path / "logs").mkdir()
    write_launch(monkeypatch, tmp_path, "n1", snapshot([gpu()], events=[{"gpu": 0, "type": "xid", "data": 48}]))
    recs = load_health(tmp_path)
    assert [r["phase"] for r in recs] == ["start", "event", "end"]
    assert recs[1]["xid"] == 48 and all(r["launch_id"] == 0 and r["host"] == "n1" for r in recs)
    with open(tmp_path / HEALTH, "a") as f:
        f.write('{"phase": "end", "host": "n1", "laun')   # a node stopped mid-write
    warned = []
    assert len(load_health(tmp_path, warned.append)) == 3 and "no line end" in warned[0]
    append_health(tmp_path, [{**recs[0], "launch_id": 1}])   # the next append drops the part line
    assert [r["launch_id"] for r in load_health(tmp_path)] == [0, 0, 0, 1]
    with open(tmp_path / HEALTH, "a") as f:
        f.write('{"phase": "start", "host": "n1", "launch_id": -1, "attempt": 0, "t": 1}\n')
    with pytest.raises(RunFolderError, match=r"health.jsonl:5: 'launch_id' must be an integer"):
        load_health(tmp_path)


def test_deltas_from_start_to_end_and_a_counter_missing_at_either_end(tmp_path, monkeypatch):
    from commbench.analysis.health_view import delta, run_health, seen_max

    (tmp_path / "logs").mkdir()
    then = {"0": {"ecc": {"volatile_sbe": 4, "volatile_dbe": 1}, "pcie": {"replay_counter": 7},
                  "energy_mj": 987654321 + 42_000_000}}
    write_launch(monkeypatch, tmp_path, "n1", snapshot([gpu(ecc={"aggregate_dbe": "Not Supported"})], then=then))
    [g] = run_health(tmp_path).gpus
    assert (g.host, g.gpu, g.launch_id) == ("n1", 0, 0) and g.duration_s == pytest.approx(60.0)
    assert delta(g, "ecc.volatile_sbe") == 4 and delta(g, "ecc.volatile_dbe") == 1
    assert delta(g, "pcie.replay_counter") == 7 and delta(g, "energy_j") == pytest.approx(42_000.0)
    assert delta(g, "ecc.aggregate_dbe") == "not available: Not Supported"
    assert seen_max(g, "gen", "pcie_gen_max") == 5
    g.end = None
    assert delta(g, "ecc.volatile_sbe").startswith("not available: no end record")
