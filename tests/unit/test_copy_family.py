"""The copy family on the CPU: its suites' expansion and what can never run, each row's bound on the
info --json fixtures (one PCIe H200, 8x H100 and 8x H200 NVSwitch nodes), the report's pair matrix
and heatmap from a fixture run folder, accept naming a slow pair (or a slow GPU), and kernels/copy.cu
compiling."""
from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from commbench.analysis.accept.rules import load_rules
from commbench.analysis.accept.verdict import evaluate
from commbench.analysis.bounds import row_bound, with_bounds
from commbench.analysis.copy_matrix import matrix, one_gpu_table, pair_groups
from commbench.analysis.report.build import build_report, report_input
from commbench.analysis.report.document import Section
from commbench.analysis.report.sections import copy as copy_section
from commbench.errors import SuiteError
from commbench.families import get_family
from commbench.families.copy import buffers
from commbench.runfolder.reader import load_run
from commbench.suite import load_suite
from tests.unit.copy_fixture import copy_rows, write_copy_run

ROOT = Path(__file__).resolve().parents[2]
LINKS = ROOT / "tests" / "fixtures" / "links"
FAM = get_family("copy")


def _links(name: str) -> dict:
    return json.loads((LINKS / f"{name}.json").read_text())["links"]


def _suite(tmp_path, bench: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text("name: s\ndefaults: {ranks: 1}\nbenchmarks:\n  - {name: b, family: copy, " + bench + "}\n")
    return p


# --- expansion and what can never run -----------------------------------------------------------

def test_shipped_suite_expands_every_op_engine_and_ordered_pair():
    s = load_suite(ROOT / "suites" / "copy.yaml", gpu_count=8)
    assert {c.family for c in s.cases} == {"copy"} and {c.ranks for c in s.cases} == {1}
    pairs = [c for c in s.cases if c.op in ("p2p", "bidir")]
    assert len(pairs) == 2 * 2 * 64                          # op x engine x (gpu, peer)
    runnable = [c for c in pairs if not FAM.unsupported(c)]
    assert len(runnable) == 2 * 2 * 56                       # every ordered pair of 8 GPUs
    assert {(c.param("gpu"), c.param("peer")) for c in runnable} == {(a, b) for a in range(8) for b in range(8)
                                                                     if a != b}
    assert all("not its own peer" in FAM.unsupported(c) for c in pairs if c.param("gpu") == c.param("peer"))
    host = [c for c in s.cases if c.op in ("h2d", "d2h") and c.param("memory") == "pageable"]
    assert host and {c.param("engine") for c in host} == {"ce"}
    assert {c.param("engine") for c in s.cases if c.op == "d2d"} == {"ce", "sm"}
    assert len({c.case_id for c in s.cases}) == len(s.cases)


def test_smoke_suite_has_both_engines_on_every_one_gpu_op():
    s = load_suite(ROOT / "tests" / "gpu" / "suites" / "copy-smoke.yaml", gpu_count=1)
    ran = {(c.op, c.param("engine")) for c in s.cases if not FAM.unsupported(c)}
    assert {(op, e) for op in ("h2d", "d2h", "d2d") for e in ("ce", "sm")} <= ran
    assert max(c.size_bytes for c in s.cases) == 1 << 30


@pytest.mark.parametrize("bench, field, words", [
    ("ops: [d2d], sizes: [1MiB], params: {memory: pageable}", "params.memory", "moves no host memory"),
    ("ops: [h2d], sizes: [1MiB], params: {memory: pageable, engine: sm}", "params.memory", "device mapping"),
    ("ops: [p2p], sizes: [1MiB]", "params.peer", "names the second"),
    ("ops: [h2d], sizes: [1MiB], params: {peer: 1}", "params.peer", "applies to p2p and bidir"),
    ("ops: [h2d], sizes: [6B]", "sizes", "whole 4-byte words"),
    ("ops: [h2d], sizes: [1MiB], ranks: 2", "ranks", "one process"),
    ("ops: [h2d], sizes: [1MiB], timing: graph, params: {memory: pageable}", "timing", "CUDA graph"),
    ("ops: [h2d], sizes: [1MiB], params: {gpu: 64}", "params.gpu", "gpu must be 0..63"),
])
def test_validate_refuses_what_never_runs_naming_the_field(tmp_path, bench, field, words):
    with pytest.raises(SuiteError) as err:
        load_suite(_suite(tmp_path, bench), gpu_count=1)
    assert field in str(err.value) and words in str(err.value)


def test_traffic_counts_both_directions_of_bidir():
    s = load_suite(ROOT / "suites" / "copy.yaml", gpu_count=8)
    by_op = {c.op: c for c in s.cases if not FAM.unsupported(c)}
    assert FAM.traffic(by_op["bidir"], 1).algbw_bytes == 2 * by_op["bidir"].size_bytes
    assert FAM.traffic(by_op["p2p"], 1).algbw_bytes == by_op["p2p"].size_bytes
    assert FAM.traffic(by_op["h2d"], 1).bus_factor == 1.0


def test_rotation_slots_fill_the_span_and_keep_slots_aligned():
    assert buffers.slot_stride(1000) == 1024 and buffers.slot_stride(1 << 20) == 1 << 20
    assert buffers.slot_count(1 << 20, 256 << 20) == 256
    assert buffers.slot_count(1 << 30, 256 << 20) == 1           # one copy larger than the span: no rotation
    assert all(m < 0 for m in buffers.MASKS)                     # bit 31 set: the pattern is never zero


def test_the_check_catches_a_changed_a_shifted_and_an_uncopied_vector():
    import torch

    good = buffers.pattern(1024, 0, "cpu")
    assert buffers.count_wrong(good.clone(), 0) == 0 and int((good == 0).sum()) == 0
    one = good.clone()
    one[777] += 1
    assert buffers.count_wrong(one, 0) == 1
    shifted = torch.cat([good[4:], good[:4]])                    # every element one 16-byte vector off
    assert buffers.count_wrong(shifted, 0) == 1024
    cleared = good.clone()
    cleared[512:516] = 0                                          # a vector the copy never wrote
    assert buffers.count_wrong(cleared, 0) == 4
    assert buffers.count_wrong(buffers.pattern(1024, 1, "cpu"), 0) == 1024   # bidir's two directions differ


# --- bounds on the info --json fixtures ----------------------------------------------------------

def _row(op, gpu=0, peer=-1, **extra):
    return {"family": "copy", "op": op, "backend": "cuda", "world_size": 1, "num_nodes": 1, "gpu": gpu,
            "peer": peer, "memory": "pinned", "engine": "ce", **extra}


def _bound(row, links):
    limit, reason = row_bound(row, links)
    return (round(limit.gbps, 2), limit.link) if limit else (None, reason)


def test_one_pcie_h200_bounds_host_copies_by_pcie_and_device_copies_by_hbm_half():
    m = _links("h200-pcie")
    assert _bound(_row("h2d"), m) == (63.02, "pcie5x16")
    assert _bound(_row("d2h", memory="pageable"), m) == (63.02, "pcie5x16")
    assert "pageable" in row_bound(_row("d2h", memory="pageable"), m)[1]
    assert _bound(_row("d2d"), m) == (2458.35, "hbm3e")          # 4,916.7 GB/s of HBM, each byte read and written
    assert "not among the GPUs" in _bound(_row("p2p", 0, 1), m)[1]


@pytest.mark.parametrize("name, hbm_half", [("8x-h100-nvswitch", 1676.15), ("8x-h200-nvswitch", 2458.35)])
def test_nvswitch_nodes_bound_pairs_by_nvlink(name, hbm_half):
    m = _links(name)
    assert _bound(_row("p2p", 3, 6), m) == (450.0, "nvlink4x18")
    assert _bound(_row("bidir", 6, 3), m) == (900.0, "nvlink4x18 both ways")
    assert _bound(_row("d2d", 7), m) == (hbm_half, m["gpus"][7]["hbm_label"])
    assert _bound(_row("h2d", 5), m) == (63.02, "pcie5x16")


def test_pcie_only_pair_and_a_degraded_gpu_bound_by_the_pair_own_links():
    m = _links("h200-pcie")
    second = copy.deepcopy(m["gpus"][0])
    second.update(index=1, pci_bus_id="00000000:2B:00.0", pcie_width=8, pcie_gbps=31.51)   # trained to x8
    m["gpus"].append(second)
    assert _bound(_row("p2p", 0, 1), m) == (31.51, "pcie5x8")       # the slower GPU of the pair
    assert _bound(_row("bidir", 1, 0), m) == (63.02, "pcie5x8 both ways")
    assert _bound(_row("h2d", 0), m) == (63.02, "pcie5x16")         # GPU 0's own link, not the node's slowest
    assert _bound(_row("h2d", 1), m) == (31.51, "pcie5x8")
    # CUDA_VISIBLE_DEVICES=1: CUDA's device 0 is NVML's GPU 1; the row's PCI address finds it
    assert _bound(_row("h2d", 0, gpu_bus_id="00000000:2B:00.0"), m) == (31.51, "pcie5x8")


def test_with_bounds_gives_copy_rows_pct_of_bound_and_the_fixture_stays_under_its_bound():
    df = with_bounds(pd.DataFrame(copy_rows()), {"links": _links("8x-h200-nvswitch")})
    assert df["bound_gbps"].notna().all()
    h2d = df[(df.op == "h2d") & (df.gpu == 0) & (df.engine == "ce")].iloc[0]
    assert h2d.pct_of_bound == pytest.approx(55.5 / 63.02 * 100, abs=0.05)
    assert df["pct_of_bound"].max() <= 105
    missing = with_bounds(pd.DataFrame([_row("d2d", busbw_gbps=1.0)]), {})
    assert math.isnan(missing["bound_gbps"][0]) and "does not describe" in missing["bound_reason"][0]


# --- the report: pair matrix and heatmap ---------------------------------------------------------

def test_pair_matrix_has_every_ordered_pair_and_an_empty_diagonal():
    rows = with_bounds(pd.DataFrame(copy_rows({(2, 5): 0.5})), {"links": _links("8x-h200-nvswitch")})
    groups = pair_groups(rows)
    assert [(w["op"], w["engine"]) for w, _ in groups] == [("p2p", "ce"), ("p2p", "sm"), ("bidir", "ce"),
                                                           ("bidir", "sm")]
    p2p = dict(((w["op"], w["engine"]), g) for w, g in groups)[("p2p", "ce")]
    m = matrix(p2p)
    assert m.shape == (8, 8) and all(math.isnan(m.loc[i, i]) for i in range(8))
    assert m.loc[2, 5] == 190.0 and m.loc[5, 2] == 380.0              # ordered: only 2 -> 5 is slow
    assert matrix(p2p, "pct_of_bound").loc[2, 5] == pytest.approx(42.2, abs=0.1)
    table = one_gpu_table(rows)
    assert len(table) == 2 * 8 * 3 and set(table["op"]) == {"h2d", "d2h", "d2d"}


def test_report_writes_the_copy_section_with_heatmap_and_matrices(tmp_path):
    run = load_run(write_copy_run(tmp_path / "copy-run", copy_rows({(2, 5): 0.5})))
    doc = build_report([run])
    sec = next(s for s in doc.sections if s.title.startswith("Copies"))
    images = [it for it in sec.items if hasattr(it, "png")]
    assert len(images) == 1 and images[0].png.startswith(b"\x89PNG")
    subs = {it.title: it for it in sec.items if isinstance(it, Section)}
    p2p_ce = next(s for t, s in subs.items() if t.startswith("Pair matrix: p2p ce 512MiB"))
    table = next(it for it in p2p_ce.items if isinstance(it, pd.DataFrame))
    assert table.loc[table["from GPU"] == 2, "to 5"].iloc[0] == "190.0 (42%)"
    assert table.loc[table["from GPU"] == 5, "to 2"].iloc[0] == "380.0 (84%)"
    assert copy_section.SECTION.applies_to(report_input([run]))


def test_copy_section_on_one_gpu_says_no_pair_was_measured(tmp_path):
    run = load_run(write_copy_run(tmp_path / "one", copy_rows(gpus=1)))
    sec = next(s for s in build_report([run]).sections if s.title.startswith("Copies"))
    assert any("No GPU pair was measured" in it for it in sec.items if isinstance(it, str))


# --- accept: a slow pair named by its GPUs -------------------------------------------------------

def _accept(tmp_path, slow) -> dict:
    run = load_run(write_copy_run(tmp_path / "run", copy_rows(slow)))
    shutil.copy(ROOT / "suites" / "copy.yaml", tmp_path / "copy.yaml")
    verdicts, _ = evaluate(run, load_rules(tmp_path / "copy.yaml"))
    return {v.check: v for v in verdicts if v.kind == "rule"}


def test_accept_names_the_slow_pair(tmp_path):
    v = _accept(tmp_path, {(2, 5): 0.6})
    assert v["copy-host-pinned"].passed and v["copy-device"].passed and v["copy-pairs-bidir"].passed
    p2p = v["copy-pairs-p2p"]
    assert not p2p.passed and p2p.measured == "50.7"
    assert "2 copy row(s) miss it: GPU 2 -> GPU 5 p2p ce 512MiB: 50.7, GPU 2 -> GPU 5 p2p sm 512MiB: 50.7" \
        in p2p.reason


def test_accept_names_the_gpu_in_every_slow_pair(tmp_path):
    v = _accept(tmp_path, {**{(5, p): 0.6 for p in range(8) if p != 5}, **{(p, 5): 0.7 for p in range(8) if p != 5}})
    reason = v["copy-pairs-p2p"].reason
    assert "28 copy row(s) miss it" in reason and "and 20 more" in reason and "GPU 5 is in every one" in reason


def test_pair_rules_do_not_apply_on_one_gpu(tmp_path):
    run = load_run(write_copy_run(tmp_path / "one", copy_rows(gpus=1)))
    verdicts, _ = evaluate(run, load_rules(ROOT / "suites" / "copy.yaml"))
    by = {v.check: v for v in verdicts if v.kind == "rule"}
    assert by["copy-pairs-p2p"].passed and "not applicable" in by["copy-pairs-p2p"].reason


# --- the kernel ----------------------------------------------------------------------------------

def test_copy_kernel_compiles():
    from commbench import jit

    try:
        jit.find_nvcc()
    except jit.JitError:
        pytest.skip("nvcc not installed")
    jit.compile_check("copy", arch="sm_90")


# --- a real run: copy-smoke on one H200 (2026-12-03, tests/fixtures/runs/copy-1x-h200) -------------

def test_measured_h200_copies_reach_85_pct_with_the_copy_engines_and_none_exceeds_its_bound():
    run = load_run(ROOT / "tests" / "fixtures" / "runs" / "copy-1x-h200")
    df = with_bounds(run.results, run.meta)
    ok = df[df.status == "ok"]
    assert len(ok) == 14 and ok["bound_gbps"].notna().all() and (ok["wrong"] == 0).all()
    assert ok["pct_of_bound"].max() <= 105
    big = ok[(ok.size_bytes == 1 << 30) & (ok.memory == "pinned")]
    assert set(big.engine) == {"ce", "sm"}                        # both paths reported
    ce = big[big.engine == "ce"].set_index("op")["pct_of_bound"]
    assert set(ce.index) == {"h2d", "d2h", "d2d"} and (ce >= 85).all()
    assert set(big.bound_link) == {"pcie5x16", "hbm3e"}
