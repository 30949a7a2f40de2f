"""The proxy family's memory plan (memory.py) on the shipped suite's Cases, an oversized user Case,
and the chunked source pattern and byte comparison (bench.py) on CPU tensors with a small chunk."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from commbench.families import get_family
from commbench.families.proxy import bench
from commbench.measure.memory import GIB, DeviceFree, fit_reason
from commbench.suite.loader import load_suite

ROOT = Path(__file__).resolve().parents[2]
FAMILY = get_family("proxy")
H100 = DeviceFree(int(79 * GIB), int(79 * GIB), "NVIDIA H100 80GB HBM3")   # free with a CUDA context
MIB = 1 << 20


def suite_cases():
    cases = load_suite(ROOT / "suites" / "proxy.yaml", gpu_count=1, overrides={"ranks": 1}).cases
    return [c for c in cases if FAMILY.unsupported(c) is None]


def pick(**want):
    return next(c for c in suite_cases() if all((getattr(c, k) if hasattr(c, k) else c.param(k)) == v
                                                for k, v in want.items()))


def parts(plan) -> dict:
    return dict(plan.parts)


def test_memory_module_imports_no_gpu_package():
    code = ("import sys, commbench.families.proxy.memory; "
            "bad = [k for k in ('cupy', 'torch', 'cuda') if k in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_suite_case_has_a_plan_that_fits_an_h100():
    plans = [(FAMILY.memory_bytes(c, 1), c) for c in suite_cases()]
    assert plans and all(plan is not None for plan, _ in plans)
    worst, case = max(plans, key=lambda pc: pc[0].peak_bytes)
    assert (case.op, case.size_bytes, case.param("executor")) == ("bandwidth", 256 * MIB, "device")
    assert worst.peak_bytes < 0.6 * GIB and fit_reason(worst, H100, 1) is None, worst.text()


@pytest.mark.parametrize("backend", ["proxy", "direct"])
def test_the_largest_transfer_plans_both_windows_and_one_chunk(backend):
    plan = FAMILY.memory_bytes(pick(op="bandwidth", backend=backend, size_bytes=256 * MIB, executor="device"), 1)
    assert parts(plan)["source window"] == parts(plan)["destination window"] == 256 * MIB
    assert parts(plan)["counters and stamps"] < 64 << 10
    chunk = 4 * bench.CHUNK_WORDS   # bytes per chunk: its int64 index is twice that, not 1.5 GiB
    assert dict(plan.transient) == {"pattern chunk (int64 index)": 2 * chunk, "check chunk": chunk}


@pytest.mark.parametrize("executor", ["host", "peer"])
def test_a_destination_off_this_gpu_is_not_counted(executor):
    plan = FAMILY.memory_bytes(pick(op="bandwidth", backend="proxy", size_bytes=256 * MIB, executor=executor), 1)
    assert "destination window" not in parts(plan) and parts(plan)["source window"] == 256 * MIB
    chunk = 4 * bench.CHUNK_WORDS   # its chunk is brought here to be compared
    assert dict(plan.transient)["check chunk"] == 2 * chunk
    assert "pinned host memory" in plan.note


def test_rate_windows_hold_one_message_per_command_up_to_the_cap():
    copy = pick(op="rate", backend="direct", size_bytes=4096, num_ctas=32)   # 128 producers x 256 commands
    assert parts(FAMILY.memory_bytes(copy, 1))["source window"] == 128 * 256 * 4096
    many = dataclasses.replace(copy, size_bytes=64 << 10)   # 32768 x 64 KiB: capped at 256 MiB
    assert parts(FAMILY.memory_bytes(many, 1))["source window"] == bench.WINDOW_CAP_BYTES
    delivery = pick(op="rate", backend="proxy", executor="none", num_ctas=132, proxy_threads=8)
    plan = FAMILY.memory_bytes(delivery, 1)
    assert parts(plan)["source window"] == 132 * 4 * 2048 * 8 and "destination window" not in parts(plan)


def test_latency_counts_its_stamps():
    plan = FAMILY.memory_bytes(pick(bench="delivery-latency"), 1)   # 200 + 5000 kernel-clock stamps
    assert parts(plan)["counters and stamps"] >= 8 * 5200


def test_an_oversized_user_case_says_it_cannot_fit():
    big = dataclasses.replace(pick(op="bandwidth", backend="direct", size_bytes=256 * MIB, executor="device"),
                              size_bytes=100 << 30)
    assert FAMILY.unsupported(big) is None
    plan = FAMILY.memory_bytes(big, 1)
    assert plan.peak_bytes > 200 * GIB
    reason = fit_reason(plan, H100, 1)
    assert reason and reason.startswith("needs 200.") and "free on NVIDIA H100 80GB HBM3" in reason


# --- the chunked pattern and comparison on CPU tensors ----------------------------------------------
@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(bench, "CHUNK_WORDS", 4)   # 16-byte chunks
    return 16


def _reference(window_bytes: int, salt: int):
    """The whole-window pattern as the family wrote it before it was chunked."""
    i = torch.arange(window_bytes // 4, dtype=torch.int64)
    return (((i * 2654435761 + salt * 40503) & 0x7FFFFFFF) | 1).to(torch.int32).view(torch.uint8)


@pytest.mark.parametrize("window", [8, 16, 24, 16 * 5 + 8])
def test_pattern_in_chunks_is_the_whole_window_pattern(small_chunks, window):
    st = SimpleNamespace(src=torch.zeros(window, dtype=torch.uint8), window_bytes=window)
    bench.fill(st, salt=7)
    assert torch.equal(st.src, _reference(window, 7))
    assert not torch.equal(st.src, _reference(window, 1))


def test_byte_check_counts_errors_at_chunk_boundaries(small_chunks):
    window = 16 * 4 + 8
    src = torch.zeros(window, dtype=torch.uint8)
    bench.fill_words(src, salt=7)
    dst = src.clone()   # executor host: the destination is (pinned) host memory, compared chunk by chunk
    assert bench.count_wrong_bytes(dst, src) == 0
    for i in (0, 15, 16, 31, 32, window - 1):
        dst[i] ^= 0xFF
    assert bench.count_wrong_bytes(dst, src) == 6
    assert bench.count_wrong_bytes(torch.zeros(window, dtype=torch.uint8), src) == int((src != 0).sum())
