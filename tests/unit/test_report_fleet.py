"""The report's fleet section (analysis/report/fleet.py, fleet_plots.py, sections/fleet.py): a placed
run over many nodes or pairs ranks what stands out (robust z) with the GPU health flags, draws the
per-size distributions and the pair heatmaps, and writes the full matrix and ranking beside the
report. The folders are benchmarks/fleet_scale.py's synthetic ones, through the real writer."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from commbench.analysis.report import fleet
from commbench.analysis.report.build import build_report
from commbench.analysis.report.document import Image, Link, Section
from commbench.analysis.report.fleet_plots import pooled
from commbench.runfolder.reader import load_run

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("fleet_scale", ROOT / "benchmarks" / "fleet_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def pairs_run(tmp_path_factory):
    """64 nodes, 16 rounds of pairs: a slow node, a slow link, an XID node, a PCIe Gen3 x8 node."""
    folder = tmp_path_factory.mktemp("fleet") / "pairs"
    faults = _bench().build_pairs_folder(folder, 64, 16)
    return load_run(folder), faults


def _items(sec: Section, kind):
    out = []
    for it in sec.items:
        if isinstance(it, kind):
            out.append(it)
        if isinstance(it, Section):
            out += _items(it, kind)
    return out


def test_the_ranking_names_the_health_nodes_first_then_the_slow_node_and_the_link(pairs_run):
    run, faults = pairs_run
    panels = fleet.panels(run.results)
    flags = fleet.health_flags([run])
    assert set(flags) == {faults["xid"], faults["pcie"]}
    assert "XID 79" in flags[faults["xid"]] and "Gen3 (max Gen5)" in flags[faults["pcie"]]
    table = fleet.ranked(panels, flags)
    top = list(table["node or pair"])
    assert set(top[:2]) == {faults["xid"], faults["pcie"]}          # health first, nothing slow about them
    assert top[2] == faults["slow_node"] and ",".join(faults["link"]) in top[3:5]
    slow = table[table["node or pair"] == faults["slow_node"]].iloc[0]
    assert slow["speed vs others"] == pytest.approx(1 / 1.4, rel=0.05) and slow["robust z"] < -3.5
    assert slow["unit"].startswith("node (16 of its 16 pairs")
    # the slow node's pairs are counted on its line, not listed one by one
    assert not [u for u in top if "," in u and faults["slow_node"] in u]
    assert len(table) <= 8, table


def test_a_healthy_even_fleet_ranks_nobody(tmp_path):
    folder = tmp_path / "even"
    faults = _bench().build_pairs_folder(folder, 20, 6)
    rows = load_run(folder).results
    bad = {faults["slow_node"], *faults["link"]}   # the pairs of the slow node and the slow link left out
    even = rows[~rows["hosts"].astype(str).str.split(",").map(lambda h: bool(set(h) & bad))]
    assert fleet.applies(even)
    assert fleet.ranked(fleet.panels(even), {}).empty


def test_the_pair_matrix_is_symmetric_and_the_pooled_overview_keeps_the_worst_pair(pairs_run):
    run, faults = pairs_run
    [p] = fleet.panels(run.results)
    m = fleet.pair_matrix(p)
    assert m.shape == (64, 64) and np.allclose(m.to_numpy(), m.to_numpy().T, equal_nan=True)
    a, b = faults["link"]
    assert m.loc[a, b] == pytest.approx(0.5, rel=0.06)
    assert int(np.isfinite(m.to_numpy()).sum()) == 2 * 16 * 32   # 16 rounds of 32 pairs, both halves
    cells, starts = pooled(m, blocks=8)
    assert cells.shape == (8, 8) and starts[:2] == [0, 8]
    i, j = m.index.get_loc(a) // 8, m.index.get_loc(b) // 8
    assert cells[i, j] == pytest.approx(m.loc[a, b])   # a block shows its worst pair


def test_the_section_draws_and_writes_the_matrix_and_ranking_beside_the_report(pairs_run, tmp_path):
    run, faults = pairs_run
    doc = build_report([run], tmp_path)
    titles = [s.title for s in doc.sections]
    assert titles.index("Fleet") == titles.index("Curves") + 1
    sec = doc.sections[titles.index("Fleet")]
    names = {im.name for im in _items(sec, Image)}
    assert names == {"fleet-distributions.png", "fleet-all_reduce-nccl-0.png"}
    links = {ln.href for ln in _items(sec, Link)}
    assert links == {"fleet-ranked.csv", "fleet-all_reduce-nccl-0-matrix.csv"}
    matrix = pd.read_csv(tmp_path / "fleet-all_reduce-nccl-0-matrix.csv", index_col=0)
    assert matrix.shape == (64, 64)
    ranked = pd.read_csv(tmp_path / "fleet-ranked.csv")
    assert ranked["node or pair"].iloc[2] == faults["slow_node"]


def test_the_section_applies_to_many_placed_nodes_only():
    def rows(n_hosts, hosts_of):
        return pd.DataFrame([{"hosts": hosts_of(i), "status": "ok", "op": "all_reduce", "size_bytes": 1024,
                              "busbw_gbps": 1.0} for i in range(n_hosts)])
    assert fleet.applies(rows(fleet.MIN_NODES, lambda i: f"n{i}"))
    assert not fleet.applies(rows(fleet.MIN_NODES - 1, lambda i: f"n{i}"))
    assert not fleet.applies(rows(40, lambda i: ""))            # not placed
    assert not fleet.applies(rows(40, lambda i: f"a{i},b{i},c{i}"))   # groups of three: not nodes nor pairs
