"""The report's GPU health section (analysis/report/sections/health.py): one part per node, a row per
GPU and launch, what the card lacks listed with NVML's reason, a damaged health.jsonl named."""
from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from commbench.cli import cli
from tests.unit.health_snapshots import gpu, snapshot, write_launch

RUNS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "runs"


def _report(run: Path, tmp_path) -> str:
    res = CliRunner().invoke(cli, ["report", str(run), "--out", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    return (tmp_path / "r.md").read_text()


def test_one_part_per_node_with_the_launch_deltas_and_the_reasons_of_what_is_missing(tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "gpu8-healthy", run)
    write_launch(monkeypatch, run, "node01", snapshot([gpu(), gpu()]))
    then = {"1": {"ecc": {"volatile_sbe": 3}, "pcie": {"replay_counter": 5}}}
    write_launch(monkeypatch, run, "node02", snapshot([gpu(), gpu(pcie={"gen": 3, "width": 8})],
                                                      events=[{"gpu": 1, "type": "xid", "data": 79}], then=then))
    md = _report(run, tmp_path)
    part = md[md.index("## GPU health"):]
    assert "### Node node01" in part and "### Node node02" in part
    node2 = part[part.index("### Node node02"):]
    row = next(line for line in node2.splitlines() if line.startswith("| 0 | 1 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4:10] == ["3", "0", "0 corr / 0 unc", "79", "Gen3 of Gen5, x8 of x16", "+5"]
    assert "Not available on this node: nvlink (Not Supported); retired_pages (Not Supported)." in node2


def test_a_run_without_health_records_has_no_section_and_a_damaged_file_is_named(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "gpu8-healthy", run)
    assert "## GPU health" not in _report(run, tmp_path)
    (run / "health.jsonl").write_text("not json\n")
    md = _report(run, tmp_path)
    assert "health.jsonl could not be read" in md and "health.jsonl:1: not a JSON line" in md
