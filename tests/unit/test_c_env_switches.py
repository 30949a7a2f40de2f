"""The multicast kill switches are checked where NCCL and NVSHMEM read them: the C environment
(libc getenv). A libc setenv (a library, a sitecustomize through ctypes) changes only that copy;
os.environ never sees it, so a check of os.environ alone is fooled."""
import ctypes
import json
import os

import pytest

from commbench import runner, safety
from tests.conftest import needs_mpi
from tests.unit.sitecustomize_run import run_with_sitecustomize

SWITCHES = {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


class OneRank:
    size, rank = 1, 0

    def allgather(self, obj):
        return [obj]


@pytest.fixture
def held(monkeypatch):
    """This process with the switches set as a launch sets them (restored afterwards, C copy too)."""
    for k, v in SWITCHES.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv(safety.EXPECTED_VAR, json.dumps(SWITCHES, sort_keys=True))
    yield
    for k in SWITCHES:   # os.environ assignment calls putenv: the C copy follows again
        os.environ[k] = os.environ[k]


def c_setenv(name: str, value: str) -> None:
    libc = ctypes.CDLL(None)
    assert libc.setenv(name.encode(), value.encode(), 1) == 0


def test_a_c_level_setenv_is_seen(held):
    assert safety.held_switches() == SWITCHES and safety.c_environment_split() is None
    assert runner._tampered(OneRank(), safety.active_kill_switches()) is None
    c_setenv("NCCL_NVLS_ENABLE", "1")
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"     # Python's copy never knew
    assert "NCCL_NVLS_ENABLE" not in safety.held_switches()
    reason = runner._tampered(OneRank(), safety.active_kill_switches())
    assert reason and "C environment" in reason and "NCCL_NVLS_ENABLE" in reason
    with pytest.raises(safety.SwitchesNotHeld, match="NCCL communicator not created"):
        safety.before_communicator("NCCL communicator")


def test_a_switch_off_in_both_copies_is_seen(held, monkeypatch):
    monkeypatch.setenv("NVSHMEM_DISABLE_NVLS", "0")   # both copies agree, but the launch set 1
    assert safety.c_environment_split() is None
    assert "NVSHMEM_DISABLE_NVLS no longer set" in safety.c_switch_problem(safety.expected_switches())


@needs_mpi
def test_a_rank_whose_c_environment_flips_refuses_to_measure(tmp_path):
    """A sitecustomize calls libc setenv in every rank: os.environ still says 0, NCCL would read 1.
    Every Case fails with the reason, and run.json does not record the switch as held."""
    rows, meta, console = run_with_sitecustomize(
        tmp_path,
        "import ctypes, os, sys\n"
        "if 'COMMBENCH_KILL_SWITCHES' in os.environ:   # only the ranks' environment has it\n"
        "    ctypes.CDLL(None).setenv(b'NCCL_NVLS_ENABLE', b'1', 1)\n",
        ["all_reduce"])
    assert len(rows) == 1, console
    assert rows[0]["status"] == "failed" and "C environment" in rows[0]["reason"], rows[0]
    seen = meta["kill_switches_seen_by_ranks"]
    assert all("NCCL_NVLS_ENABLE" not in ranks[r] for ranks in seen.values() for r in ranks), seen
