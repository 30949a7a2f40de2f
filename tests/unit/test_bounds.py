"""The ceiling of each row (analysis/bounds.py) from the links sysinfo/links.py records, on
fixtures of the one-H200 PCIe machine, an 8x H100 NVSwitch node and a 2-node 400G rail layout."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from commbench.analysis import bound_limits
from commbench.analysis.bounds import row_bound, with_bounds
from commbench.sysinfo import links
from tests.unit.links_fixtures import FIXTURES, h100_links, h100_nvml, h100_rail_links, h200_links, rail_sysfs


def _row(op, n=8, nodes=1, family="collectives", **extra):
    return {"family": family, "op": op, "backend": "nccl", "world_size": n, "num_nodes": nodes,
            "ranks_per_node": n // nodes, "in_place": False, **extra}


def _bound(row, machine):
    limit, reason = row_bound(row, machine)
    return (round(limit.gbps, 2), limit.link) if limit else (None, reason)


def test_h200_pcie_machine_facts(tmp_path):
    gpu = h200_links(tmp_path)["gpus"][0]
    assert (gpu["nvlink_active"], gpu["nvlink_gbps"]) == (0, None)
    # NVML reports the idle link at Gen1: the bound uses the generation it trains to
    assert (gpu["pcie_gen"], gpu["pcie_gen_current"], gpu["pcie_width"], gpu["pcie_gbps"]) == (5, 1, 16, 63.02)
    assert gpu["hbm_gbps"] == pytest.approx(4916.7) and gpu["hbm_label"] == "hbm3e"


def test_nvidia_smi_fallback_reads_pcie_and_uses_the_datasheet_for_hbm():
    machine = links.collect({}, smi_text=(FIXTURES / "h200-pcie-smi-q.txt").read_text(), sys_root="/nonexistent")
    gpu = machine["gpus"][0]
    assert machine["source"] == "nvidia-smi -q"
    assert (gpu["name"], gpu["pcie_gen"], gpu["pcie_width"], gpu["memory_clock_mhz"]) == ("NVIDIA H200", 5, 16, 3201)
    assert (gpu["hbm_gbps"], gpu["hbm_source"]) == (4800.0, "datasheet")


def test_nvlink_generation_from_the_architecture_not_nvmls_enum(tmp_path):
    gpu = h100_links(tmp_path)["gpus"][3]
    assert (gpu["nvlink_gen"], gpu["nvlink_active"], gpu["nvlink_gbps"]) == (4, 18, 450.0)
    assert links.nvlink_generation(None, {7}) == 5 and links.nvlink_generation("8.0") == 3


def test_unreadable_machine_gives_no_bound_and_says_why(tmp_path):
    machine = links.collect({}, nvml=None, smi_text="", sys_root=str(tmp_path))
    assert machine["gpus"] == [] and "nvidia-smi" in machine["problems"][0]
    limit, reason = row_bound(_row("all_gather"), machine)
    assert limit is None and "not read" in reason
    out = with_bounds(pd.DataFrame([_row("all_gather", busbw_gbps=100.0), _row("all_gather", backend="mpi")]), {})
    assert math.isnan(out["bound_gbps"][0]) and "does not describe" in out["bound_reason"][0]
    assert out["bound_reason"][1] == "backend mpi moves host memory: no GPU link bound"


def test_one_h200(tmp_path):
    m = h200_links(tmp_path)
    assert _bound(_row("broadcast", n=1), m) == (2458.35, "hbm3e")        # a device copy: HBM / 2
    assert _bound(_row("sendrecv", n=1), m) == (2458.35, "hbm3e")
    assert _bound(_row("put", n=1, family="nvshmem"), m) == (2458.35, "hbm3e")
    assert "no link is crossed" in _bound(_row("dispatch", n=1, family="moe"), m)[1]
    assert "busbw is 0" in _bound(_row("all_reduce", n=1), m)[1]
    assert "nothing has to move" in _bound(_row("broadcast", n=1, in_place=True), m)[1]
    assert _bound(_row("all_gather", n=2), m) == (63.02, "pcie5x16")        # two such GPUs: PCIe
    assert _bound(_row("all_reduce", n=2), m) == (63.02, "pcie5x16 any-algo")
    assert "ranks shared one GPU" in _bound(_row("all_reduce", n=4, ranks_per_gpu=4), m)[1]


@pytest.mark.parametrize("row, expected", [
    (_row("all_gather"), (450.0, "nvlink4x18")),
    (_row("reduce_scatter"), (450.0, "nvlink4x18")),
    (_row("alltoall"), (450.0, "nvlink4x18")),
    (_row("sendrecv"), (450.0, "nvlink4x18")),
    (_row("all_reduce", nccl_algo="Ring"), (450.0, "nvlink4x18")),
    # NVLS may be used (multicast supported, algorithm unknown): the switch reduces, so each GPU
    # only has to receive the result once: 2(n-1)/n x 450
    (_row("all_reduce"), (787.5, "nvlink4x18 nvls")),
    (_row("all_reduce", family="allreduce", allow_multicast=False), (450.0, "nvlink4x18")),
    (_row("all_reduce", nccl_algo="Tree"), (787.5, "nvlink4x18 any-algo")),
    (_row("put", n=2, family="nvshmem", direction="bi"), (900.0, "nvlink4x18 both ways")),
    (_row("dispatch", family="moe"), (450.0, "nvlink4x18")),
    (_row("spin", family="harness"), (None, "the harness family measures no bandwidth")),
])
def test_8x_h100_nvswitch(tmp_path, row, expected):
    assert _bound(row, h100_links(tmp_path)) == expected


def test_published_8x_h100_numbers_stay_under_their_bounds(tmp_path):
    """docs/metrics.md's numbers: Ring all_reduce ~370, NVLS ~480, all_gather ~360 GB/s."""
    m = h100_links(tmp_path)
    for row, busbw in ((_row("all_reduce", nccl_algo="Ring"), 370), (_row("all_reduce", nccl_algo="NVLS"), 482),
                       (_row("all_gather"), 370)):
        limit, _ = row_bound(row, m)
        assert 50 < busbw / limit.gbps * 100 <= 100


@pytest.mark.parametrize("row, expected", [
    # rings leave a node over the NICs of the GPUs used: 8 rails x 50 GB/s, below NVLink's 450
    (_row("all_gather", n=16, nodes=2), (400.0, "nic-400Gx8")),
    (_row("all_reduce", n=16, nodes=2, nccl_algo="Ring"), (400.0, "nic-400Gx8")),
    # Tree / SHARP: a node sends and receives the buffer at least once: 2(n-1)/n x 400
    (_row("all_reduce", n=16, nodes=2, nccl_algo="Tree"), (750.0, "nic-400Gx8 tree")),
    # alltoall: half of each rank's data leaves the node: 50 x 2 x 15/16
    (_row("alltoall", n=16, nodes=2), (93.75, "nic-400Gx8")),
    # one rank per node: its own rail only
    (_row("all_gather", n=2, nodes=2), (50.0, "nic-400G")),
    (_row("put", n=2, nodes=2, family="nvshmem", direction="uni"), (50.0, "nic-400G")),
    # two ranks per node on GPUs 0 and 1: their two rails
    (_row("reduce_scatter", n=4, nodes=2), (100.0, "nic-400Gx2")),
])
def test_two_node_rail_layout(tmp_path, row, expected):
    assert _bound(row, h100_rail_links(tmp_path)) == expected


def test_without_rail_affinity_every_nic_counts_and_the_reason_says_so(tmp_path):
    m = h100_rail_links(tmp_path)
    for g in m["gpus"]:
        g["nics"] = []
    limit, reason = row_bound(_row("all_gather", n=2, nodes=2), m)
    assert (limit.gbps, limit.link) == (400.0, "nic-400Gx8") and "affinity unknown" in reason


def test_slower_rails_and_missing_nics(tmp_path):
    m = links.collect({}, nvml=h100_nvml(), sys_root=str(rail_sysfs(tmp_path / "s", rate="200 Gb/sec (4X HDR)")))
    assert _bound(_row("all_gather", n=16, nodes=2), m) == (200.0, "nic-200Gx8")
    assert "no active network adapter" in _bound(_row("all_gather", n=16, nodes=2), h100_links(tmp_path))[1]


def test_with_bounds_columns(tmp_path):
    rows = pd.DataFrame([_row("all_gather", busbw_gbps=360.0), _row("spin", family="harness", busbw_gbps=math.nan)])
    out = with_bounds(rows, {"links": h100_links(tmp_path)})
    assert list(out["bound_link"]) == ["nvlink4x18", ""]
    assert out["pct_of_bound"][0] == 80.0 and math.isnan(out["pct_of_bound"][1])
    assert out["bound_reason"][1] == "the harness family measures no bandwidth"


def test_link_names():
    assert bound_limits.link_name("nvlink4x18") == "NVLink 4 (18 links)"
    assert bound_limits.link_name("pcie5x16") == "PCIe 5 x16"
    assert bound_limits.link_name("hbm3e") == "HBM3E"


def _run_folder(tmp_path, machine, rows):
    """A stored run folder (results.csv, run.json with ``links``) as `commbench run` writes one."""
    import json

    from commbench.runfolder.schema import COLUMNS

    folder = tmp_path / "run"
    (folder / "logs").mkdir(parents=True)
    full = [{**dict.fromkeys(COLUMNS, ""), "suite": "s", "bench": "b", "status": "ok", "wrong": 0, "dtype": "float32",
             "variant": "default", "timing": "events", "log": "logs/l.log", **r} for r in rows]
    for i, r in enumerate(full):
        r["case_id"] = f"c{i}"
    pd.DataFrame(full).to_csv(folder / "results.csv", index=False)
    (folder / "run.json").write_text(json.dumps({"schema_version": 1, "suite": "s", "links": machine}))
    return folder


def _ag_rows():
    sizes_busbw = ((2**20, 40.0), (2**26, 300.0), (2**30, 409.5))
    return [{**_row("all_gather"), "size_bytes": s, "busbw_gbps": b, "time_us": 1.0} for s, b in sizes_busbw]


def test_report_has_the_bounds_section(tmp_path):
    from commbench.analysis.report.build import build_report
    from commbench.runfolder.reader import load_run

    run = load_run(_run_folder(tmp_path, h100_links(tmp_path), _ag_rows()))
    doc = build_report([run])
    sec = next(s for s in doc.sections if s.title.startswith("Bounds"))
    texts = [i for i in sec.items if isinstance(i, str)]
    assert any("all_gather nccl, 8 rank(s), reaches 91% of NVLink 4 (18 links) at 1GiB (bound 450 GB/s)" in t
               for t in texts), texts
    tables = [i for i in sec.items if isinstance(i, pd.DataFrame)]
    assert tables[0]["best pct_of_bound"].tolist() == [91.0]
    assert [i.alt for i in doc.images()].count("busbw vs size with bounds") == 1


def test_report_says_why_a_machine_has_no_bound(tmp_path):
    from commbench.analysis.report.build import build_report
    from commbench.runfolder.reader import load_run

    machine = links.collect({}, nvml=None, smi_text="", sys_root=str(tmp_path))
    doc = build_report([load_run(_run_folder(tmp_path, machine, _ag_rows()))])
    sec = next(s for s in doc.sections if s.title.startswith("Bounds"))
    why = next(i for i in sec.items if getattr(i, "title", "") == "Rows without a bound").items[0]
    assert "links were not read" in why["why"][0] and why["rows"][0] == 3


def test_accept_rule_on_pct_of_bound(tmp_path):
    from commbench.analysis.accept.rules import load_rules
    from commbench.analysis.accept.verdict import evaluate
    from commbench.runfolder.reader import load_run

    run = load_run(_run_folder(tmp_path, h100_links(tmp_path), _ag_rows()))
    for floor, passed in ((90, True), (95, False)):
        rules = tmp_path / f"r{floor}.yaml"
        rules.write_text("rules:\n  - name: near-nvlink\n    select: {op: all_gather, size_bytes: {min: 1GiB}}\n"
                         f"    metric: pct_of_bound\n    op: \">=\"\n    value: {floor}\n")
        verdict = evaluate(run, load_rules(rules))[0][0]
        assert verdict.passed is passed and verdict.unit == "%" and "91" in verdict.measured, verdict


def test_machine_description_carries_links_and_never_fails():
    from commbench.sysinfo import machine

    described = machine.collect(probe_gpu=False)
    assert described["links"]["gpus"] == [] and described["links"]["problems"] == ["GPU probes were skipped"]


def test_a_broken_nvml_falls_back_to_nvidia_smi(tmp_path):
    class Broken:
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

        def nvmlShutdown(self):
            pass

    text = (FIXTURES / "h200-pcie-smi-q.txt").read_text()
    machine = links.collect({}, nvml=Broken(), smi_text=text, sys_root=str(tmp_path))
    assert machine["source"] == "nvidia-smi -q" and machine["gpus"][0]["pcie_gbps"] == 63.02


def _stored(name: str) -> dict:
    """A machine as `commbench info --json` stores it (its `links`), read back without the machine."""
    import json

    return json.loads((FIXTURES / f"{name}.json").read_text())["links"]


@pytest.mark.parametrize("machine, row, measured, low, high", [
    # published numbers (docs/metrics.md, "Numbers to compare against") land below their bounds
    ("8x-h100-nvswitch", _row("all_reduce", nccl_algo="Ring"), 370.0, 80, 85),
    ("8x-h100-nvswitch", _row("all_reduce", nccl_algo="NVLS"), 482.0, 60, 63),
    ("8x-h100-nvswitch", _row("alltoall"), 355.0, 78, 80),
    ("8x-h200-nvswitch", _row("all_reduce", nccl_algo="Ring"), 328.0, 72, 74),
    ("2-node-h100-rail-400g", _row("all_gather", n=2, nodes=2), 48.0, 95, 97),   # one CX-7 NDR each
    ("h200-pcie", _row("broadcast", n=1), 2105.0, 85, 86),                       # our H200's device copy
])
def test_stored_machine_descriptions(machine, row, measured, low, high):
    out = with_bounds(pd.DataFrame([{**row, "busbw_gbps": measured}]), {"links": _stored(machine)})
    assert low <= out["pct_of_bound"][0] <= high, out.iloc[0].to_dict()


def test_nvidia_smi_nvlink_status_fallback_with_the_capability_from_the_gpu_query(tmp_path):
    text = (FIXTURES / "h200-pcie-smi-q.txt").read_text()
    facts = {"gpus": [{"index": 0, "compute_capability": "9.0"}],
             "nvlink": [{"index": 0, "links": 18, "active": 18, "link_gbps": [26.562] * 18}]}
    gpu = links.collect(facts, smi_text=text, sys_root=str(tmp_path))["gpus"][0]
    assert (gpu["nvlink_gen"], gpu["nvlink_active"], gpu["nvlink_gbps"]) == (4, 18, 450.0)
