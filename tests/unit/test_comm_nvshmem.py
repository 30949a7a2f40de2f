"""NVSHMEM start-up on CPU (commbench.comm.nvshmem): transport names, init failures, the install,
and the multicast kill switches it needs held before NVSHMEM may start."""
import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.comm import nvshmem as shmem
from commbench.errors import SkipCase
from commbench.comm.context import RankContext

ROOT = Path(__file__).resolve().parents[2]
HELD = {"NVSHMEM_DISABLE_NVLS": "1", "NCCL_NVLS_ENABLE": "0"}


def test_import_pulls_no_gpu_package():
    code = ("import sys, commbench.comm.nvshmem; "
            "bad = [k for k in ('cupy', 'torch', 'nvshmem', 'cuda') if k in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_transport_label():
    assert shmem.transport_label({}, True) == "p2p"
    assert shmem.transport_label({}, False) == "ibrc"
    assert shmem.transport_label({"NVSHMEM_IB_ENABLE_IBGDA": "1"}, False) == "ibgda"
    assert shmem.transport_label({"NVSHMEM_REMOTE_TRANSPORT": "UCX"}, False) == "ucx"


def test_reason_from_keeps_nvshmem_message():
    text = "WARN: transport ibrc: no active IB device found\nnvshmem init failed\n"
    reason = shmem._reason_from(text, 7)
    assert "status 7" in reason and "no active IB device" in reason


def test_setup_without_gpu_skips():
    ctx = RankContext(world=None, device="cpu")
    with pytest.raises(SkipCase, match="CUDA GPU"):
        shmem.ensure(ctx)


def test_failed_init_is_remembered():
    ctx = RankContext(world=None, device="cuda:0")
    ctx.cache[shmem.CACHE_KEY] = SkipCase("NVSHMEM could not initialise (status 7): no HCA")
    with pytest.raises(SkipCase, match="no HCA"):
        shmem.ensure(ctx)


def test_captured_output_collects_c_prints():
    with shmem.captured_output() as text:
        ctypes.CDLL(None).printf(b"hello from C\n")
    assert "hello from C" in text[0]


def test_metadata_without_gpu():
    meta = shmem.metadata()
    assert set(meta) == {"nvshmem", "nvshmem_home", "nvshmem4py"}


def test_multicast_refusal_names_each_switch_not_held():
    assert shmem.multicast_refusal(HELD) is None
    assert shmem.multicast_refusal({**HELD, "NVSHMEM_DISABLE_NVLS": "true"}) is None
    reason = shmem.multicast_refusal({"NCCL_NVLS_ENABLE": "0"})
    assert "NVSHMEM_DISABLE_NVLS=1" in reason and "NCCL_NVLS_ENABLE" not in reason
    reason = shmem.multicast_refusal({"NVSHMEM_DISABLE_NVLS": "0", "NCCL_NVLS_ENABLE": "1"})
    assert "NVSHMEM_DISABLE_NVLS=1" in reason and "NCCL_NVLS_ENABLE=0" in reason


def test_start_up_refuses_without_the_switches_and_never_sets_them(monkeypatch):
    for key in HELD:
        monkeypatch.delenv(key, raising=False)

    def no_install():
        raise AssertionError("must refuse before looking for NVSHMEM")

    monkeypatch.setattr(shmem, "find_install", no_install)
    ctx = RankContext(world=None, device="cuda:0")
    with pytest.raises(SkipCase, match="multicast off"):
        shmem.ensure(ctx)
    import os

    assert not any(key in os.environ for key in HELD)
    assert shmem.CACHE_KEY not in ctx.cache   # a later Case with the switches held may still start it
