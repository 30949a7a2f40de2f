"""The interference family's memory plan (Interference.memory_bytes, interference/memory.py) on the
shipped suite's Cases and on user GEMMs: the parts are the shapes' arithmetic, the shipped Cases fit
an H100 80 GB, and the largest GEMM the parameters allow is planned at its three matrices (building
them holds no matrix-sized index)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from commbench.families import get_family
from commbench.families.interference import memory
from commbench.measure.memory import GIB
from commbench.suite.loader import load_suite

ROOT = Path(__file__).resolve().parents[2]
H100_FREE_BYTES = int(79.0 * GIB)   # an H100 80 GB's free memory with a CUDA context
FAM = get_family("interference")
MIB = 1 << 20


def suite_cases(ranks: int = 1):
    return load_suite(ROOT / "suites" / "interference.yaml", gpu_count=ranks, overrides={"ranks": ranks}).cases


def pick(cases, **want):
    return next(c for c in cases if all(getattr(c, k) == v for k, v in want.items()))


def with_gemm(case, m: int, n: int, k: int, dtype: str | None = None):
    params = {**dict(case.params), "gemm_m": m, "gemm_n": n, "gemm_k": k}
    return dataclasses.replace(case, params=tuple(sorted(params.items())), dtype=dtype or case.dtype)


def true_peak(m: int, n: int, k: int, elem: int, buffers: int, check: int) -> int:
    """The most held at once: the buffers, the three matrices and the workspace, and the larger check."""
    return buffers + (m * k + k * n + m * n) * elem + memory.CUBLAS_WORKSPACE_BYTES + check


def test_shipped_all_reduce_256mib_parts_are_the_shapes_arithmetic():
    case = pick(suite_cases(), bench="ops", op="all_reduce", size_bytes=256 * MIB)
    assert (case.dtype, case.param("gemm_m"), case.param("gemm_n"), case.param("gemm_k")) == (
        "bfloat16", 8192, 8192, 8192)
    plan = FAM.memory_bytes(case, 1)
    gemm = 8192 * 8192 * 2   # 128 MiB each, bfloat16
    assert dict(plan.parts) == {"send buffer": 256 * MIB, "receive buffer": 256 * MIB, "GEMM A": gemm,
                                "GEMM B": gemm, "GEMM C": gemm, "cuBLAS workspace": 32 * MIB}
    transient = dict(plan.transient)
    assert transient["check"] == 7 * 8 * (1 << 26)   # the collective's check: a 64 Mi-element chunk
    assert transient["GEMM check rows"] == 16 * 8192 * (2 + 8)
    assert plan.peak_bytes == 512 * MIB + 3 * gemm + 32 * MIB + 3584 * MIB   # the check is the peak
    assert plan.peak_bytes == true_peak(8192, 8192, 8192, 2, 512 * MIB, 3584 * MIB)


def test_shipped_16mib_peak_is_the_matrices_and_the_collective_check():
    case = pick(suite_cases(), bench="protocols", size_bytes=16 * MIB)
    plan = FAM.memory_bytes(case, 1)
    assert dict(plan.transient)["check"] == 7 * 8 * (8 << 20)   # 8 Mi bfloat16 elements: below the chunk
    assert plan.peak_bytes == 32 * MIB + 3 * 128 * MIB + 32 * MIB + 7 * 8 * (8 << 20)
    assert plan.peak_bytes == true_peak(8192, 8192, 8192, 2, 32 * MIB, 7 * 8 * (8 << 20))


def test_every_shipped_case_fits_an_h100():
    for ranks in (1, 8):
        plans = [FAM.memory_bytes(c, ranks) for c in suite_cases(ranks)]
        assert all(p is not None for p in plans)
        worst = max(p.peak_bytes for p in plans)
        assert 4 * GIB < worst < 5 * GIB, max(plans, key=lambda p: p.peak_bytes).text()   # 256 MiB + check
        assert worst + GIB <= H100_FREE_BYTES


def test_the_collective_shards_the_gemm_does_not():
    case = pick(suite_cases(8), bench="ops", op="reduce_scatter", size_bytes=256 * MIB)
    one, eight = FAM.memory_bytes(case, 1), FAM.memory_bytes(case, 8)
    assert dict(eight.parts)["send buffer"] == 256 * MIB
    assert dict(eight.parts)["receive buffer"] == 32 * MIB   # one rank's chunk
    for part in ("GEMM A", "GEMM B", "GEMM C", "cuBLAS workspace"):
        assert dict(eight.parts)[part] == dict(one.parts)[part]


def test_the_largest_gemm_is_planned_at_its_three_matrices():
    case = with_gemm(pick(suite_cases(), bench="ops", op="all_reduce", size_bytes=16 * MIB),
                     65536, 65536, 65536, "float32")
    plan = FAM.memory_bytes(case, 1)
    parts = dict(plan.parts)
    assert parts["GEMM A"] == parts["GEMM B"] == parts["GEMM C"] == 16 * GIB
    assert plan.peak_bytes == true_peak(65536, 65536, 65536, 4, 32 * MIB, 7 * 8 * (4 << 20))   # 16 MiB float32
    # 48 GiB and change: an 80 GB GPU takes it (an int64 index of B beside A needed 80 GiB)
    assert 48 * GIB < plan.peak_bytes < 49 * GIB and plan.peak_bytes + GIB <= H100_FREE_BYTES


def test_two_such_ranks_sharing_one_h100_would_not_fit():
    case = with_gemm(pick(suite_cases(), bench="ops", op="all_reduce", size_bytes=16 * MIB),
                     65536, 65536, 65536, "float32")
    assert 2 * (FAM.memory_bytes(case, 2).peak_bytes + GIB) > H100_FREE_BYTES


@pytest.mark.parametrize("m, n, k, dtype", [(8192, 8192, 8192, "float32"), (64, 12288, 12288, "float16"),
                                            (1, 1, 1, "bfloat16"), (65536, 1, 65536, "float32")])
def test_peak_is_the_largest_phase(m, n, k, dtype):
    case = with_gemm(pick(suite_cases(), bench="ops", op="all_gather", size_bytes=256 * MIB), m, n, k, dtype)
    plan = FAM.memory_bytes(case, 1)
    elem = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
    count = 256 * MIB // elem
    check = max(7 * 8 * min(count, 1 << 26), min(16, m) * n * (elem + 8))
    assert plan.peak_bytes == true_peak(m, n, k, elem, 2 * 256 * MIB, check)


def test_gloo_and_bitwise():
    case = pick(suite_cases(), bench="ops", op="all_reduce", size_bytes=16 * MIB)
    assert FAM.memory_bytes(dataclasses.replace(case, backend="gloo", dtype="float32"), 1) is None
    # this family offers no bitwise hooks: check: bitwise adds no reference copy
    bitwise = FAM.memory_bytes(dataclasses.replace(case, bitwise_repeats=10), 1)
    assert bitwise == FAM.memory_bytes(case, 1)
