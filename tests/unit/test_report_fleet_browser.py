"""The fleet report in headless Chromium: a pairs run over 64 nodes (benchmarks/fleet_scale.py's
synthetic folder) loads without errors, every image (distributions, heatmap, curves) decodes and is
laid out, and the ranked table names the faulty nodes. Skipped without Chromium (`make system-deps`)."""
from __future__ import annotations

import pytest

from commbench.analysis.report import html
from commbench.analysis.report.build import build_report
from commbench.runfolder.reader import load_run
from tests.unit.test_report_browser import _open, chromium  # noqa: F401  (the fixture)
from tests.unit.test_report_fleet import _bench

pytestmark = pytest.mark.browser


def test_a_fleet_report_renders_in_chromium_with_its_heatmap_and_names(chromium, tmp_path):  # noqa: F811
    faults = _bench().build_pairs_folder(tmp_path / "pairs", 64, 16)
    page = html.render(build_report([load_run(tmp_path / "pairs")], tmp_path))
    assert "<h2>Fleet</h2>" in page or ">Fleet<" in page
    probe, _stderr = _open(chromium, page, tmp_path)
    assert probe["errors"] == []
    assert len(probe["imgs"]) >= 4   # busbw, time, the distributions, the pair heatmap
    for img in probe["imgs"]:
        assert img["w"] > 0 and img["h"] > 0 and img["shown"] > 0
    for node in (faults["slow_node"], faults["xid"], faults["pcie"], ",".join(faults["link"])):
        assert node in page
