"""accept's health rules (analysis/accept/health_rules.py): nodes whose GPUs show an XID, a new ECC
error or a PCIe link trained down are named bad, though nothing about them is slow. The run folder is
the stored 4-node fixture whose timings pass; its health.jsonl is written by the real writer from
NVML snapshots through the stand-in pynvml."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from tests.unit.health_snapshots import gpu, snapshot, write_launch

RUNS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "runs"
NODES = ["node01", "node02", "node03", "node04"]
RING_RULE = """rules:
  localize: true
  checks:
    - name: ring
      select: {op: all_reduce, backend: nccl, size_bytes: {min: 1GiB}}
      metric: busbw_gbps
      aggregate: min
      op: ">="
      value: 328
"""


def _run(tmp_path, monkeypatch, faults: dict) -> Path:
    """gpu8-healthy (timings that pass) with two GPUs per node; ``faults``: node -> snapshot parts."""
    run = tmp_path / "run"
    shutil.copytree(RUNS / "gpu8-healthy", run)
    for launch_id in (0, 1):
        for node in NODES:
            fault = faults.get(node, {}) if launch_id == 1 else {}
            snap = snapshot(fault.get("gpus", [gpu(), gpu()]), fault.get("events"), fault.get("then"))
            write_launch(monkeypatch, run, node, snap, launch_id=launch_id)
    return run


def _accept(run: Path, tmp_path, rules: str = RING_RULE):
    (tmp_path / "rules.yaml").write_text(rules)
    return CliRunner().invoke(cli, ["accept", str(run), "--rules", str(tmp_path / "rules.yaml"),
                                    "--out", str(tmp_path / "a.html"), "--junit", str(tmp_path / "j.xml")])


def _named(output: str) -> set[str]:
    return {n for n in NODES if f"bad node {n} (health)" in output}


def test_healthy_gpus_pass_and_the_health_verdict_says_what_it_judged(tmp_path, monkeypatch):
    res = _accept(_run(tmp_path, monkeypatch, {}), tmp_path)
    assert res.exit_code == 0, res.output
    assert "8 GPU(s) on 4 node(s) judged" in res.output and not _named(res.output)


def test_an_xid_a_new_double_bit_error_and_a_link_at_gen3_x8_name_their_nodes_though_nothing_is_slow(
        tmp_path, monkeypatch):
    faults = {"node02": {"events": [{"gpu": 1, "type": "xid", "data": 79}]},
              "node03": {"then": {"0": {"ecc": {"volatile_dbe": 1, "aggregate_dbe": 1}}}},
              "node04": {"gpus": [gpu(), gpu(pcie={"gen": 3, "width": 8})]}}
    res = _accept(_run(tmp_path, monkeypatch, faults), tmp_path)
    assert res.exit_code == 1, res.output
    assert _named(res.output) == {"node02", "node03", "node04"}
    assert "XID 79 (GPU has fallen off the bus" in res.output
    assert "1 new double-bit ECC error(s)" in res.output
    assert "PCIe link trained down: generation Gen3 (max Gen5)" in res.output and "width x8 (max x16)" in res.output
    assert "slow " not in res.output and "suspect" not in res.output   # the timings say nothing
    junit = (tmp_path / "j.xml").read_text()
    assert junit.count("bad node node0") == 3


def test_an_idle_link_below_its_generation_passes_when_the_launch_saw_it_at_its_maximum(tmp_path, monkeypatch):
    """A GPU lowers its PCIe generation when idle: the start record at Gen1 is no fault when the
    samples during the launch (or the end record) saw Gen5."""
    faults = {"node01": {"gpus": [gpu(pcie={"gen": 1}), gpu()], "then": {"0": {"pcie": {"gen": 5}}}}}
    res = _accept(_run(tmp_path, monkeypatch, faults), tmp_path)
    assert res.exit_code == 0, res.output


def test_rows_remapped_for_uncorrectable_errors_or_pending_fail_and_the_limits_are_the_sites(tmp_path, monkeypatch):
    faults = {"node01": {"gpus": [gpu(remapped_rows=[0, 2, 0, 0]), gpu()]},
              "node03": {"gpus": [gpu(), gpu(remapped_rows=[1, 0, 1, 0])]}}
    run = _run(tmp_path, monkeypatch, faults)
    res = _accept(run, tmp_path)
    assert res.exit_code == 1 and _named(res.output) == {"node01", "node03"}, res.output
    assert "2 row(s) remapped for uncorrectable errors" in res.output and "remapping is pending" in res.output
    relaxed = RING_RULE.replace("  localize: true\n", "  localize: true\n  health: {max_uncorrectable_rows: 4, "
                                "fail_pending_rows: false}\n")
    assert _accept(run, tmp_path, relaxed).exit_code == 0


def test_time_throttled_is_judged_against_the_launch_and_the_xid_list_is_the_sites(tmp_path, monkeypatch):
    hot = {"fields": {"NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN": 6_000_000_000}}   # 6 s of 60 s
    faults = {"node02": {"then": {"1": hot}},
              "node04": {"events": [{"gpu": 0, "type": "xid", "data": 13}]}}
    run = _run(tmp_path, monkeypatch, faults)
    res = _accept(run, tmp_path)
    assert res.exit_code == 1 and _named(res.output) == {"node02"}, res.output   # XID 13: not on the default list
    assert "throttled 10.0% of the launch (hw_thermal 6000 ms; limit 1%)" in res.output
    site = RING_RULE.replace("  localize: true\n",
                             "  localize: true\n  health: {max_throttled_pct: 20, xids: [13, 79]}\n")
    res = _accept(run, tmp_path, site)
    assert res.exit_code == 1 and _named(res.output) == {"node04"}, res.output
    assert "XID 13 (on the site list)" in res.output


def test_a_gate_asked_for_fails_a_run_without_gpu_records_and_an_unasked_one_stays_silent(tmp_path, monkeypatch):
    from tests.unit.health_snapshots import fake_pynvml

    run = tmp_path / "run"
    shutil.copytree(RUNS / "gpu8-healthy", run)
    fake_pynvml(monkeypatch, None)   # nvmlInit: Driver Not Loaded
    write_launch(monkeypatch, run, "node01", None)
    res = _accept(run, tmp_path)
    assert res.exit_code == 0 and "health" not in res.output.replace("accept.html", ""), res.output
    asked = RING_RULE.replace("  localize: true\n", "  localize: true\n  health: true\n")
    res = _accept(run, tmp_path, asked)
    assert res.exit_code == 1 and "no GPU health record to judge (node01: not available: no NVML" in res.output
    off = RING_RULE.replace("  localize: true\n", "  localize: true\n  health: false\n")
    faults = {"node02": {"events": [{"gpu": 0, "type": "xid", "data": 79}]}}
    assert _accept(_run(tmp_path / "x", monkeypatch, faults), tmp_path, off).exit_code == 0


@pytest.mark.parametrize("part,message", [
    ("health: {xid: [79]}", "field 'health.xid': unknown key"),
    ("health: {xids: []}", "field 'health.xids': expected a list of XID numbers (not empty)"),
    ("health: {max_throttled_pct: -1}", "field 'health.max_throttled_pct': expected a number >= 0"),
    ("health: {throttle_reasons: [cold]}", "unknown reason 'cold'"),
    ("health: 3", "field 'health': expected true, false or a mapping"),
])
def test_a_bad_health_part_exits_2_naming_file_line_and_field(tmp_path, part, message):
    res = _accept(RUNS / "gpu8-healthy", tmp_path, RING_RULE.replace("  localize: true\n", f"  {part}\n"))
    assert res.exit_code == 2 and message in res.output and "rules.yaml:2:" in res.output, res.output


def test_a_flat_rules_file_takes_health_beside_rules(tmp_path, monkeypatch):
    faults = {"node03": {"events": [{"gpu": 0, "type": "xid", "data": 48}]}}
    run = _run(tmp_path, monkeypatch, faults)
    flat = ("health: {xids: [79]}\nrules:\n  - {name: ring, select: {op: all_reduce}, metric: busbw_gbps, "
            "op: '>=', value: 1}\n")
    assert _accept(run, tmp_path, flat).exit_code == 0   # 48 is off this site's list
    res = _accept(run, tmp_path, flat.replace("[79]", "[48]"))
    assert res.exit_code == 1 and _named(res.output) == {"node03"} and "XID 48 (double-bit ECC" in res.output
