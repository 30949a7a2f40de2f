"""The multicast gate (DESIGN section 7): kill switches win, opt-in required, device must support it."""
import pytest

from commbench import safety
from commbench.families.allreduce import gate
from commbench.errors import SkipCase
from commbench.families.allreduce.family import FAMILY
from commbench.comm.context import RankContext
from commbench.families.base import Case

SWITCHES = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
KILL_TEXT = ("multicast disabled by site kill switch (NCCL_NVLS_ENABLE=0, NVSHMEM_DISABLE_NVLS=1, "
             "TORCH_SYMM_MEM_DISABLE_MULTICAST=1)")
OPT_IN_TEXT = "multicast not enabled by the suite (set allow_multicast: true to opt in)"
DEVICE_TEXT = "device does not report CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED"


def make_case(backend="nccl", env=None, allow=False, size=1024):
    return Case(suite="s", bench="b", family="allreduce", op="all_reduce", backend=backend,
                variant="default", env=tuple(sorted((env or {}).items())), dtype="float32",
                size_bytes=size, params=(("allow_multicast", allow), ("num_ctas", 32)),
                warmup=1, iters=2, timing="auto", ranks=2, ranks_per_node=2, timeout_s=60)


@pytest.fixture
def clean_env(monkeypatch):
    for key in SWITCHES:
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_kill_switch_reason_is_exact_and_wins_over_opt_in():
    assert safety.multicast_block_reason(suite_allows=True, device_supports=True, env=SWITCHES) == KILL_TEXT
    one = {"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    assert safety.multicast_block_reason(suite_allows=True, device_supports=True, env=one) == (
        "multicast disabled by site kill switch (TORCH_SYMM_MEM_DISABLE_MULTICAST=1)")


def test_opt_in_and_device_reasons():
    assert safety.multicast_block_reason(suite_allows=False, device_supports=True, env={}) == OPT_IN_TEXT
    assert safety.multicast_block_reason(suite_allows=True, device_supports=False, env={}) == DEVICE_TEXT
    assert safety.multicast_block_reason(suite_allows=True, device_supports=None, env={}) == DEVICE_TEXT
    assert safety.multicast_block_reason(suite_allows=True, device_supports=True, env={}) is None


def test_switch_values_that_do_not_disable_are_not_switches():
    assert safety.active_kill_switches({"NCCL_NVLS_ENABLE": "1", "NVSHMEM_DISABLE_NVLS": "0"}) == {}


@pytest.mark.parametrize("key", sorted(SWITCHES))
def test_variant_cannot_unset_or_override_a_kill_switch(key):
    parent = {**SWITCHES, "PATH": "/bin"}
    bad = {key: "1" if SWITCHES[key] == "0" else "0", "NCCL_ALGO": "NVLS"}
    child = safety.protect_env(bad, parent_env=parent)
    assert child[key] == SWITCHES[key]
    assert child["NCCL_ALGO"] == "NVLS"  # other variables pass through
    assert safety.active_kill_switches(child) == SWITCHES


def test_variant_may_set_switches_the_site_left_alone():
    child = safety.protect_env({"NCCL_NVLS_ENABLE": "0"}, parent_env={})
    assert child["NCCL_NVLS_ENABLE"] == "0"


@pytest.mark.parametrize("backend,env,wanted", [
    ("torch_multimem", {}, True),
    ("nccl", {"NCCL_ALGO": "NVLS"}, True),
    ("nccl_symm", {"NCCL_ALGO": "nvlstree"}, True),
    ("nccl", {"NCCL_ALGO": "Ring,NVLS"}, True),
    ("nccl", {"NCCL_ALGO": "allreduce:nvls;allgather:ring"}, True),
    ("nccl", {"NCCL_NVLS_ENABLE": "1"}, True),
    ("torch_one_shot", {"TORCH_SYMM_MEM_DISABLE_MULTICAST": "0"}, True),
    ("nccl", {"NCCL_ALGO": "Ring"}, False),
    ("nccl", {"NCCL_ALGO": "^NVLS"}, False),
    ("nccl", {"NCCL_ALGO": "^Ring"}, False),
    ("nccl", {}, False),
    ("torch_one_shot", {}, False),
    ("torch_two_shot", {}, False),
    ("cb_one_shot", {"NCCL_ALGO": "NVLS"}, False),  # NCCL_ALGO does not concern our kernels
])
def test_which_cases_need_multicast(backend, env, wanted):
    assert gate.multicast_requested(backend, env) is wanted


def test_planning_skips_multicast_cases_when_kill_switch_set(clean_env):
    for key, value in SWITCHES.items():
        clean_env.setenv(key, value)
    for case in (make_case("torch_multimem", allow=True), make_case("nccl", {"NCCL_ALGO": "NVLS"}, allow=True),
                 make_case("nccl", {"NCCL_ALGO": "NVLSTree"}, allow=False)):
        assert FAMILY.unsupported(case) == KILL_TEXT
    # Non-multicast Cases still run on a machine with the switches set.
    assert FAMILY.unsupported(make_case("nccl", {"NCCL_ALGO": "Ring"})) is None
    assert FAMILY.unsupported(make_case("cb_two_shot")) is None
    assert FAMILY.unsupported(make_case("torch_one_shot")) is None


def test_planning_skips_without_opt_in(clean_env):
    assert FAMILY.unsupported(make_case("torch_multimem", allow=False)) == OPT_IN_TEXT
    # Opted in and no switch: planning defers the device question to setup.
    assert FAMILY.unsupported(make_case("torch_multimem", allow=True)) is None


def test_runtime_gate_asks_the_device_only_when_nothing_else_forbids(clean_env):
    calls = []

    def fake_query(ordinal):
        calls.append(ordinal)
        return False

    clean_env.setattr(gate, "device_supports_multicast", fake_query)
    case = make_case("nccl", {"NCCL_ALGO": "NVLS"}, allow=True)
    assert gate.runtime_block_reason(case, 3) == DEVICE_TEXT
    assert calls == [3]
    assert gate.runtime_block_reason(make_case("nccl", {"NCCL_ALGO": "NVLS"}, allow=False), 0) == OPT_IN_TEXT
    clean_env.setenv("NCCL_NVLS_ENABLE", "0")
    assert gate.runtime_block_reason(case, 0) == "multicast disabled by site kill switch (NCCL_NVLS_ENABLE=0)"
    assert calls == [3]  # never queried while a switch is set


def test_runtime_gate_passes_only_with_all_three(clean_env):
    clean_env.setattr(gate, "device_supports_multicast", lambda ordinal: True)
    assert gate.runtime_block_reason(make_case("torch_multimem", allow=True), 0) is None


class _World:
    rank, size, local_rank, local_size, num_nodes, hostname = 0, 2, 0, 2, 1, "h"
    comm = None


def test_setup_skips_with_gate_reason_before_touching_any_gpu(clean_env):
    clean_env.setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    ctx = RankContext(world=_World(), device="cpu")
    with pytest.raises(SkipCase) as info:
        FAMILY.setup(make_case("torch_multimem", allow=True), ctx)
    assert str(info.value) == "multicast disabled by site kill switch (TORCH_SYMM_MEM_DISABLE_MULTICAST=1)"


def test_multicast_off_refusal_names_each_switch_not_held():
    assert gate.multicast_off_refusal(SWITCHES) is None
    reason = gate.multicast_off_refusal({"NCCL_NVLS_ENABLE": "0"})
    assert "TORCH_SYMM_MEM_DISABLE_MULTICAST=1" in reason and "NCCL_NVLS_ENABLE" not in reason
    reason = gate.multicast_off_refusal({"NCCL_NVLS_ENABLE": "1"})
    assert "NCCL_NVLS_ENABLE=0" in reason and "allow_multicast" in reason


def test_non_multicast_setup_refuses_without_the_switches_and_never_sets_them(clean_env):
    """The launch holds the switches for every Case that did not opt in; the family only checks."""
    import os

    ctx = RankContext(world=_World(), device="cuda:0")
    with pytest.raises(SkipCase, match="must run with multicast off"):
        FAMILY.setup(make_case("nccl"), ctx)
    assert not any(key in os.environ for key in SWITCHES)


def test_no_multicast_api_or_instruction_in_our_sources():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    family = root / "commbench" / "families" / "allreduce"
    sources = list(family.glob("*.py")) + list((root / "kernels").glob("allreduce*"))
    assert len(sources) >= 5
    for path in sources:
        text = path.read_text()
        assert "cuMulticast" not in text, path
        assert "multimem." not in text, path  # PTX multimem.ld_reduce / multimem.st
