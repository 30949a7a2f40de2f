"""accept on a run whose machine was busy (run.json machine_load) says so: in the verdict table's
document, on the terminal, and in the JUnit file (a property and a system-out line)."""
from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner

from commbench.commands.accept_cmd import accept_cmd
from tests.unit.test_accept import RING_RULE

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "tests" / "fixtures" / "runs"
RULE = RING_RULE   # the 8xH200 Ring floor, as the accept tests use it


def _run(tmp_path: Path, load_1m: float) -> Path:
    run = tmp_path / f"run-{load_1m:g}"
    shutil.copytree(RUNS / "gpu8-healthy", run)
    meta = json.loads((run / "run.json").read_text())
    snap = {"load_avg_1m": load_1m, "cpu_count": 2, "cpus_usable": 2, "gpu_processes": None}
    meta["machine_load"] = {"before": snap, "after": snap, "own_ranks": 0}
    (run / "run.json").write_text(json.dumps(meta))
    return run


def _accept(tmp_path: Path, run: Path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULE)
    junit = tmp_path / f"{run.name}.xml"
    res = CliRunner().invoke(accept_cmd, [str(run), "--rules", str(rules), "--junit", str(junit)])
    suite = ET.parse(junit).getroot().find("testsuite")
    return res, suite


def test_a_busy_machine_is_named_in_the_verdict_and_the_junit(tmp_path):
    res, suite = _accept(tmp_path, _run(tmp_path, 9.0))
    assert res.exit_code == 0, res.output   # the verdict stands; the reader is told
    assert "the machine was busy" in res.output and "load average 9.0" in res.output
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["machine_busy"] == "true"
    out = suite.find("system-out")   # the suite's own, after its testcases
    assert out is not None and "load average 9.0 on 2 CPU(s) before the run" in out.text
    md = (tmp_path / "run-9" / "accept.md").read_text()
    assert "busy machine" in md.splitlines()[0] and "Warning: run run-9: the machine was busy" in md


def test_a_quiet_machine_says_nothing(tmp_path):
    res, suite = _accept(tmp_path, _run(tmp_path, 0.1))
    assert res.exit_code == 0, res.output
    assert "busy" not in res.output
    assert {p.get("name"): p.get("value") for p in suite.iter("property")} == {"machine_busy": "false"}
    assert suite.find("system-out") is None
