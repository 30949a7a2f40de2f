"""Variant labels and launch records say what the multicast kill switches held (safety.py,
launch/group.py): a switch the suite turns on is labelled as held off, an opted-in Case keeps its label."""
import pytest

from commbench import safety
from commbench.launch import group
from commbench.suite import load_suite

BENCH = "  - {name: b, family: collectives, backends: [mpi], ops: [all_reduce], sizes: [8B], ranks: 2"


@pytest.fixture
def no_site_switches(monkeypatch):
    for key in safety.KILL_SWITCHES:
        monkeypatch.delenv(key, raising=False)


def test_a_switch_the_suite_turns_on_is_labelled_as_held(tmp_path, no_site_switches):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbenchmarks:\n" + BENCH + ", env: {NCCL_NVLS_ENABLE: '1', NCCL_ALGO: Ring}}\n")
    suite = load_suite(path, gpu_count=0)
    (case,) = suite.cases
    assert "NCCL_NVLS_ENABLE=1" not in case.variant and "NCCL_NVLS_ENABLE=0 (held" in case.variant
    assert "NCCL_ALGO=Ring" in case.variant
    # what the ranks get, and what run.json's launch says they got
    assert safety.launch_env(tmp_path, dict(case.env), allow_multicast=False)["NCCL_NVLS_ENABLE"] == "0"
    record = group.launch_record(suite.launches[0], held_off=True)
    assert record["env"]["NCCL_NVLS_ENABLE"] == "0" and record["env_not_held"] == {"NCCL_NVLS_ENABLE": "1"}
    assert record["status"] == "running"


def test_an_opted_in_case_keeps_its_label(tmp_path, no_site_switches):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbenchmarks:\n  - {name: a, family: allreduce, ranks: 2, sizes: [1MiB], "
                    "params: {allow_multicast: true}, env: {NCCL_NVLS_ENABLE: '1'}}\n")
    suite = load_suite(path, gpu_count=2)
    assert all(c.variant == "NCCL_NVLS_ENABLE=1" for c in suite.cases)
    assert "env_not_held" not in group.launch_record(suite.launches[0], held_off=False)
