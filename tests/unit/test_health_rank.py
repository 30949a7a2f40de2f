"""Health records taken by the ranks themselves (commbench/rank.py -> launch/health_probe.py): a real
CPU run whose ranks import the stand-in pynvml (on PYTHONPATH, with a snapshot named by
COMMBENCH_FAKE_NVML) stores start, event and end records per launch in health.jsonl; accept names
the node whose GPU raised an XID though its rows pass; without NVML each node says why."""
from __future__ import annotations

import json
import os
import textwrap

from click.testing import CliRunner

from commbench.cli import cli
from tests.conftest import needs_mpi
from tests.unit.health_snapshots import FAKE_DIR, gpu, snapshot

SUITE = """\
name: h
defaults: {ranks: 2, warmup: 1, iters: 3, sizes: [1KiB]}
benchmarks:
  - {name: ar, family: collectives, ops: [all_reduce], backends: [mpi]}
rules:
  checks:
    - {name: ran, select: {bench: ar}, metric: time_us, aggregate: max, op: "<=", value: 1e9}
"""


def _run(tmp_path, monkeypatch, snap: dict | None):
    if snap is not None:
        (tmp_path / "snap.json").write_text(json.dumps(snap))
        monkeypatch.setenv("COMMBENCH_FAKE_NVML", str(tmp_path / "snap.json"))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE_DIR), os.environ.get("PYTHONPATH", "")]))
    (tmp_path / "h.yaml").write_text(textwrap.dedent(SUITE))
    out = tmp_path / "run"
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "h.yaml"), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    return out, [json.loads(line) for line in (out / "health.jsonl").read_text().splitlines()]


@needs_mpi
def test_the_ranks_store_start_event_and_end_records_and_accept_names_the_node(tmp_path, monkeypatch):
    snap = snapshot([gpu(), gpu()], events=[{"gpu": 1, "type": "xid", "data": 95}])
    out, recs = _run(tmp_path, monkeypatch, snap)
    assert [(r["phase"], r.get("gpu")) for r in recs] == [("start", 0), ("start", 1), ("event", 1),
                                                          ("end", 0), ("end", 1)]
    assert {r["launch_id"] for r in recs} == {0} and recs[2]["xid"] == 95 and recs[0]["node_ranks"] == 2
    assert recs[0]["launch_hosts"] == []
    assert recs[3]["events_watched"] == ["single_bit_ecc", "double_bit_ecc", "xid", "dram_retirement"]
    assert recs[3]["during"]["samples"] >= 1 and recs[3]["during"]["pcie_gen_max"] == 5
    host = recs[0]["host"]
    res = CliRunner().invoke(cli, ["accept", str(out)])
    assert res.exit_code == 1, res.output
    assert f"bad node {host} (health)" in res.output and "XID 95 (uncontained ECC error" in res.output


@needs_mpi
def test_without_nvml_each_launch_says_so_once_per_node(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "empty"), os.environ.get("PYTHONPATH", "")]))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "pynvml.py").write_text("raise ImportError('no pynvml here')\n")
    out, recs = _run(tmp_path, monkeypatch, None)
    assert [r["phase"] for r in recs] == ["start", "end"] and all(r["gpu"] is None for r in recs)
    assert recs[0]["nvml"].startswith("not available: no NVML (nvidia-ml-py is not installed")
    assert CliRunner().invoke(cli, ["accept", str(out)]).exit_code == 0
