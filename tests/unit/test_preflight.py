"""The preflight (launch/preflight.py): a suite's node shape held against a stand-in machine at the
NVML boundary (no NVML, no GPU), and the suite keys that state it (suite/node_keys.py)."""
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from commbench.analysis.accept.preflight_junit import preflight_junit_xml
from commbench.errors import SuiteError
from commbench.launch import preflight as pf
from commbench.launch.preflight import check_preflight, preflight, shape_of
from commbench.suite import load_suite
from commbench.sysinfo.nvml_devices import GpuSeen, GpusSeen

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024**3


def machine(n: int, name: str = "NVIDIA H100 80GB HBM3", free_gib: float = 79.0, total_gib: float = 79.6):
    gpus = tuple(GpuSeen(index=i, name=name, total_bytes=int(total_gib * GIB), free_bytes=int(free_gib * GIB),
                         uuid=f"GPU-{i:04d}") for i in range(n))
    return GpusSeen(gpus, "stand-in")


NO_GPU = GpusSeen((), "none", "NVML did not load")


def suite_file(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def h100_acceptance():
    return load_suite(ROOT / "suites" / "acceptance-h100.yaml", gpu_count=8)


# --- accept: a node with fewer GPUs than its shape fails at once ---

def test_acceptance_on_one_gpu_fails_at_once_with_the_sentence_in_junit():
    pre = check_preflight(h100_acceptance(), accept=True, share_gpu=False, machine=machine(1))
    assert pre.exit_status == 1
    assert pre.verdicts == ["node has 1 GPU, the suite expects 8"]
    assert not pre.skipped   # accept launches nothing: no rows to settle
    xml = preflight_junit_xml(pre, "acceptance-h100")
    root = ET.fromstring(xml.split("?>", 1)[1])
    failures = root.findall(".//failure")
    assert [f.get("message") for f in failures] == ["node has 1 GPU, the suite expects 8"]
    assert root.get("failures") == "1"


def test_acceptance_on_its_own_shape_passes():
    pre = check_preflight(h100_acceptance(), accept=True, share_gpu=False, machine=machine(8))
    assert pre.ok and not pre.verdicts and not pre.skipped
    assert [c.name for c in pre.checks if c.passed] == ["gpus", "gpu model"]


def test_four_gpus_say_four():
    pre = check_preflight(h100_acceptance(), accept=True, share_gpu=False, machine=machine(4))
    assert pre.verdicts == ["node has 4 GPUs, the suite expects 8"]


# --- ranks share a GPU only when asked ---

def test_run_skips_launches_that_would_share_unasked():
    suite = h100_acceptance()
    pre = check_preflight(suite, accept=False, share_gpu=False, machine=machine(1))
    assert pre.exit_status == 0
    assert set(pre.skipped) == {c.case_id for c in suite.cases}   # every launch has 2 or 8 ranks
    reason = next(iter(pre.skipped.values()))
    assert "this node has 1" in reason and "share_gpu" in reason and "--set ranks=1" in reason
    assert any("node has 1 GPU, the suite expects 8" in n for n in pre.notes)


def test_run_keeps_launches_that_fit_and_skips_the_rest(tmp_path):
    path = suite_file(tmp_path, """\
        name: mixed-ranks
        benchmarks:
          - {name: ar, family: collectives, backends: [nccl], ops: [all_reduce], sizes: [4KiB], ranks: [1, 2]}
        """)
    suite = load_suite(path, gpu_count=1)
    pre = check_preflight(suite, accept=False, share_gpu=False, machine=machine(1))
    assert pre.ok
    assert {suite_case.ranks for suite_case in suite.cases if suite_case.case_id in pre.skipped} == {2}
    assert len(pre.skipped) == 1


def test_share_gpu_flag_lets_ranks_share():
    pre = check_preflight(h100_acceptance(), accept=True, share_gpu=True, machine=machine(1))
    assert pre.ok and not pre.skipped
    assert any("up to 8 ranks share 1 GPU" in n for n in pre.notes)


def test_share_gpu_suite_key(tmp_path):
    path = suite_file(tmp_path, """\
        name: shared
        share_gpu: true
        defaults: {ranks: [2, 4]}
        benchmarks:
          - {name: ar, family: collectives, backends: [nccl], ops: [all_reduce], sizes: [4KiB]}
        """)
    suite = load_suite(path, gpu_count=1)
    assert suite.share_gpu is True
    pre = check_preflight(suite, accept=False, share_gpu=False, machine=machine(1))
    assert pre.ok and not pre.skipped


def test_gate_shared_suites_ask_to_share():
    """Every suite of the GPU gate whose launches put more ranks than one GPU on the node says so."""
    missing = []
    for path in sorted((ROOT / "tests" / "gpu" / "suites").glob("*.yaml")):
        if path.name.startswith("x2"):
            continue   # written for a node of two GPUs
        suite = load_suite(path, gpu_count=1)
        shape = shape_of(suite, accept=False, share_gpu=False)
        if any(n.ranks_per_node > 1 for n in shape.local_launches) and not suite.share_gpu:
            missing.append(path.name)
    assert not missing, f"add `share_gpu: true` to {missing}"


# --- a GPU suite on a machine without a GPU ---

def test_gpu_suite_without_gpu_exits_2_within_a_second(monkeypatch):
    monkeypatch.setattr("commbench.sysinfo.nvml_devices.read_gpus", lambda env=None: NO_GPU)
    suite = load_suite(ROOT / "suites" / "acceptance-h200.yaml", gpu_count=0)
    t0 = time.monotonic()
    pre = check_preflight(suite, accept=True, share_gpu=False)
    assert time.monotonic() - t0 < 1.0
    assert pre.exit_status == 2
    assert "needs a GPU" in pre.message() and "none is visible here" in pre.message()
    assert "quickstart" in pre.message()


def test_gpu_suite_without_gpu_in_run_exits_2_too():
    suite = load_suite(ROOT / "suites" / "collectives.yaml", gpu_count=0)
    pre = check_preflight(suite, accept=False, share_gpu=False, machine=NO_GPU)
    assert pre.exit_status == 2 and "NVML did not load" in pre.verdicts[0]


def test_run_of_a_mixed_suite_without_gpu_runs_the_cpu_launches(tmp_path):
    path = suite_file(tmp_path, """\
        name: mixed
        defaults: {ranks: 2, sizes: [4KiB], ops: [all_reduce]}
        benchmarks:
          - {name: cpu, family: collectives, backends: [gloo]}
          - {name: gpu, family: collectives, backends: [nccl]}
        """)
    suite = load_suite(path, gpu_count=0)
    pre = check_preflight(suite, accept=False, share_gpu=False, machine=NO_GPU)
    assert pre.ok
    gpu_ids = {c.case_id for c in suite.cases if c.bench == "gpu"}
    assert set(pre.skipped) == gpu_ids and set(pre.skipped.values()) == {"needs a GPU; none is visible on this node"}
    accepted = check_preflight(suite, accept=True, share_gpu=False, machine=NO_GPU)
    assert accepted.exit_status == 2


def test_cpu_suite_passes_without_gpu_and_reads_no_machine(monkeypatch):
    def refuse(env=None):
        raise AssertionError("a CPU suite must not read the GPUs")

    monkeypatch.setattr("commbench.sysinfo.nvml_devices.read_gpus", refuse)
    for name in ("quickstart.yaml", "acceptance-cpu.yaml", "training-cpu.yaml"):
        suite = load_suite(ROOT / "suites" / name, gpu_count=0)
        pre = check_preflight(suite, accept=name.startswith("accept"), share_gpu=False)
        assert pre.ok and not pre.skipped and not pre.verdicts, name
        assert pre.notes == ["no launch needs a GPU"]


# --- GPU model and memory ---

def _node_suite(tmp_path, node: str):
    path = suite_file(tmp_path, f"""\
        name: node-shape
        node: {node}
        benchmarks:
          - {{name: ar, family: collectives, backends: [nccl], ops: [all_reduce], sizes: [1MiB], ranks: 1}}
        """)
    return load_suite(path, gpu_count=1)


def test_too_little_free_memory(tmp_path):
    suite = _node_suite(tmp_path, "{gpu_memory: 70GiB}")
    busy = machine(1, free_gib=12.0)
    pre = check_preflight(suite, accept=True, share_gpu=False, machine=busy)
    assert pre.exit_status == 1
    assert pre.verdicts == ["GPU 0 (NVIDIA H100 80GB HBM3) has 12.0 GiB free, the suite needs 70.0 GiB free on "
                            "each GPU"]
    ran = check_preflight(suite, accept=False, share_gpu=False, machine=busy)
    assert ran.ok and set(ran.skipped) == {c.case_id for c in suite.cases}
    assert check_preflight(suite, accept=True, share_gpu=False, machine=machine(1, free_gib=75)).ok


def test_memory_falls_back_to_total_when_free_is_unknown(tmp_path):
    suite = _node_suite(tmp_path, "{gpu_memory: 100GiB}")
    driver_only = GpusSeen((GpuSeen(0, "NVIDIA H100 80GB HBM3", 80 * GIB, None),), "cuda-driver")
    pre = check_preflight(suite, accept=True, share_gpu=False, machine=driver_only)
    assert pre.exit_status == 1 and "80.0 GiB in all" in pre.verdicts[0]


def test_gpu_model_of_the_floors(tmp_path):
    suite = _node_suite(tmp_path, "{gpu_model: H100}")
    h200 = machine(1, name="NVIDIA H200")
    pre = check_preflight(suite, accept=True, share_gpu=False, machine=h200)
    assert pre.exit_status == 2 and "for H100 GPUs" in pre.verdicts[0] and "NVIDIA H200" in pre.verdicts[0]
    assert check_preflight(suite, accept=False, share_gpu=False, machine=h200).ok   # run: a note
    assert check_preflight(suite, accept=True, share_gpu=False, machine=machine(1)).ok


def test_stated_gpu_count_beyond_the_launches(tmp_path):
    suite = _node_suite(tmp_path, "{gpus: 8}")
    pre = check_preflight(suite, accept=True, share_gpu=False, machine=machine(2))
    assert pre.verdicts == ["node has 2 GPUs, the suite expects 8"]
    assert check_preflight(suite, accept=False, share_gpu=False, machine=machine(2)).ok


def test_placed_launches_are_not_held_against_this_node():
    shape = pf.NodeShape(suite="s", gpu_launches=(pf.LaunchNeed(0, 8, ("a",), ("b",), placed=True),), accept=True)
    pre = preflight(shape, NO_GPU)
    assert pre.ok and "not checked from this node" in pre.notes[0]


# --- the suite keys ---

@pytest.mark.parametrize("text, field", [
    ("share_gpu: yes-please", "share_gpu"),
    ("node: {gpus: 0}", "gpus must be"),
    ("node: {gpus: 8, cards: 2}", "unknown field"),
    ("node: {gpu_memory: lots}", "gpu_memory"),
    ("node: {gpu_model: ''}", "gpu_model"),
    ("node: 8", "a mapping"),
])
def test_bad_node_keys_name_line_and_field(tmp_path, text, field):
    path = suite_file(tmp_path, f"name: bad\n{text}\nbenchmarks:\n  - {{name: a, family: collectives, "
                                f"backends: [mpi], ops: [all_reduce], sizes: [8B], ranks: 2}}\n")
    with pytest.raises(SuiteError) as err:
        load_suite(path, gpu_count=0)
    assert f"{path}:2:" in str(err.value) and field in str(err.value)


def test_node_key_is_read(tmp_path):
    suite = _node_suite(tmp_path, "{gpus: 8, gpu_model: H200, gpu_memory: 64GiB}")
    assert (suite.node.gpus, suite.node.gpu_model, suite.node.gpu_memory_bytes) == (8, "H200", 64 * GIB)
    assert suite.share_gpu is False


# --- wired into `run` and `accept` (launch/run.py), nothing launched ---

def _cli(args, monkeypatch, gpus: GpusSeen):
    from click.testing import CliRunner

    from commbench.cli import cli

    monkeypatch.setattr("commbench.sysinfo.nvml_devices.read_gpus", lambda env=None: gpus)
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_accept_cli_on_a_short_node_writes_the_verdict_to_junit(tmp_path, monkeypatch):
    junit = tmp_path / "accept.xml"
    t0 = time.monotonic()
    res = _cli(["accept", str(ROOT / "suites" / "acceptance-h100.yaml"), "--junit", str(junit)], monkeypatch,
               machine(1))
    assert time.monotonic() - t0 < 30
    assert res.exit_code == 1, res.output
    assert "node has 1 GPU, the suite expects 8" in res.output
    root = ET.fromstring(junit.read_text().split("?>", 1)[1])
    assert [f.get("message") for f in root.findall(".//failure")] == ["node has 1 GPU, the suite expects 8"]


def test_accept_cli_without_gpu_is_bad_input(tmp_path, monkeypatch):
    junit = tmp_path / "accept.xml"
    res = _cli(["accept", str(ROOT / "suites" / "acceptance-h200.yaml"), "--junit", str(junit)], monkeypatch,
               NO_GPU)
    assert res.exit_code == 2 and "needs a GPU" in res.output
    assert "error" in junit.read_text()


def test_run_cli_records_what_the_node_cannot_run_as_skipped(tmp_path, monkeypatch):
    import csv

    path = suite_file(tmp_path, """\
        name: two-ranks
        benchmarks:
          - {name: ar, family: collectives, backends: [nccl], ops: [all_reduce], sizes: [4KiB], ranks: 2}
        """)
    out = tmp_path / "run"
    res = _cli(["run", str(path), "--out", str(out), "--quiet"], monkeypatch, machine(1))
    assert res.exit_code == 1, res.output   # nothing measured: every Case skipped, no launch started
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [r["status"] for r in rows] == ["skipped"]
    assert "needs 2 GPUs on one node, this node has 1" in rows[0]["reason"]
    assert "preflight" in (out / "run.json").read_text()


def test_shipped_acceptance_suites_name_their_card():
    for card, other in (("H100", "NVIDIA H200"), ("H200", "NVIDIA H100 80GB HBM3")):
        suite = load_suite(ROOT / "suites" / f"acceptance-{card.lower()}.yaml", gpu_count=8)
        assert suite.node.gpu_model == card and suite.node.gpus is None   # the GPU count comes from its launches
        pre = check_preflight(suite, accept=True, share_gpu=False, machine=machine(8, name=other))
        assert pre.exit_status == 2 and f"for {card} GPUs" in pre.verdicts[0]
        ones = load_suite(ROOT / "suites" / f"acceptance-{card.lower()}.yaml", gpu_count=1,
                          overrides={"ranks": 1, "ranks_per_node": 1})
        assert check_preflight(ones, accept=True, share_gpu=False,
                               machine=machine(1, name=f"NVIDIA {card}")).ok   # --set ranks=1 on one GPU


def test_gloo_cases_of_gpu_families_need_no_gpu(tmp_path):
    path = suite_file(tmp_path, """\
        name: interf
        defaults: {ranks: 2}
        benchmarks:
          - {name: cpu, family: interference, backends: [gloo], dtypes: [float32], ops: [all_reduce], sizes: [256KiB]}
        """)
    pre = check_preflight(load_suite(path, gpu_count=0), accept=True, share_gpu=False, machine=NO_GPU)
    assert pre.ok and not pre.skipped
