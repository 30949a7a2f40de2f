"""The copy family's memory plan (families/copy/memory.py) on the shipped suite's Cases, and the
chunked fill and check that keep the pattern's temporaries to one chunk whatever the size."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from commbench.families import get_family
from commbench.comm.buffers import chunk_ranges
from commbench.families.copy import buffers
from commbench.families.copy.memory import copy_plan, pool_bytes
from commbench.measure.memory import GIB
from commbench.suite.loader import load_suite

ROOT = Path(__file__).resolve().parents[2]
H100_FREE_BYTES = int(79.0 * GIB)   # an H100 80 GB's free memory with a CUDA context
MIB = 1 << 20
SPAN = 256 * MIB
CHUNK_BYTES = buffers.CHUNK_ELEMS * buffers.CHUNK_PEAK_BYTES_PER_ELEM   # the pattern's chunk at its peak


@pytest.fixture(scope="module")
def cases():
    return load_suite(ROOT / "suites" / "copy.yaml", gpu_count=1, overrides={"ranks": 1}).cases


def pick(cases, **want):
    return next(c for c in cases if all((getattr(c, k) if hasattr(c, k) else c.param(k)) == v
                                        for k, v in want.items()))


def plan(case):
    return get_family("copy").memory_bytes(case, 1)


def with_params(case, **params):
    return dataclasses.replace(case, params=tuple(sorted({**dict(case.params), **params}.items())))


@pytest.mark.parametrize("op, size, want", [
    ("d2d", 4 << 30, {"source pool": 4 << 30, "destination pool": 4 << 30}),   # the suite's largest
    ("h2d", 1 << 30, {"destination pool": 1 << 30}),                            # the host pool is not counted
    ("d2h", 1 << 30, {"source pool": 1 << 30}),
    ("p2p", 512 * MIB, {"pool (source on gpu, destination on peer)": 512 * MIB}),   # one on each GPU
    ("bidir", 512 * MIB, {"source pool": 512 * MIB, "destination pool": 512 * MIB}),
])
def test_the_largest_cases_plan_their_device_pools_and_one_chunk(cases, op, size, want):
    case = pick(cases, op=op, size_bytes=size, engine="sm")
    p = plan(case)
    assert dict(p.parts) == want, p.text()
    assert dict(p.transient) == {"pattern chunk (fill, check)": CHUNK_BYTES}
    assert p.peak_bytes == sum(want.values()) + CHUNK_BYTES < sum(want.values()) + 0.2 * GIB
    assert "host memory" in p.note and "busiest GPU" in p.note


def test_pageable_and_pinned_host_memory_plan_the_same_device_bytes(cases):
    pinned = pick(cases, bench="pageable", op="h2d", size_bytes=1 << 30)
    assert pinned.param("memory") == "pageable"
    assert plan(pinned) == plan(with_params(pinned, memory="pinned"))


def test_small_copies_plan_the_whole_rotation_pool(cases):
    small = pick(cases, op="d2d", size_bytes=64 << 10, engine="ce")
    p = plan(small)
    assert dict(p.parts) == {"source pool": SPAN, "destination pool": SPAN}   # 4096 slots of 64 KiB
    assert plan(with_params(small, buffer_span_bytes=0)).peak_bytes == \
        2 * (64 << 10) + (64 << 10) // 4 * buffers.CHUNK_PEAK_BYTES_PER_ELEM   # one slot, a chunk that small
    assert pool_bytes(1000, SPAN) == (SPAN // 1024) * 1024      # slots 256-byte aligned
    assert pool_bytes(300 * MIB, SPAN) == 300 * MIB             # larger than the span: one copy


def test_every_shipped_case_fits_an_h100(cases):
    fam = get_family("copy")
    worst = max(plan(c).peak_bytes for c in cases if not fam.unsupported(c))
    assert 8 * GIB < worst < 8.5 * GIB              # d2d 4 GiB: two pools and a chunk
    assert worst + GIB <= H100_FREE_BYTES


def test_a_size_that_cannot_fit_plans_more_than_an_h100_has(cases):
    big = dataclasses.replace(pick(cases, op="d2d", size_bytes=4 << 30), size_bytes=64 << 30)
    p = plan(big)
    assert p.peak_bytes > H100_FREE_BYTES, p.text()
    assert p.resident_bytes == 128 << 30 and max(b for _, b in p.transient) < GIB   # the check stays a chunk


def test_the_plan_is_made_without_torch(cases):
    """The runner plans before set-up, on the CPU side: the plan imports nothing of CUDA's."""
    import subprocess
    import sys

    code = ("import sys; from commbench.families import get_family; from commbench.suite.loader import load_suite; "
            f"c = load_suite({str(ROOT / 'suites' / 'copy.yaml')!r}, gpu_count=1, overrides={{'ranks': 1}}).cases; "
            "print(max(get_family('copy').memory_bytes(x, 1).peak_bytes for x in c), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    peak, torch_loaded = out.stdout.split()
    assert int(peak) == max(plan(c).peak_bytes for c in cases) and torch_loaded == "False"
    assert copy_plan(pick(cases, op="bidir", size_bytes=512 * MIB), SPAN) == plan(pick(cases, op="bidir"))


# --- the chunked pattern --------------------------------------------------------------------------

@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(buffers, "CHUNK_ELEMS", 100)


def test_the_chunked_pattern_is_the_whole_one(small_chunks):
    import torch

    whole = torch.arange(1000, dtype=torch.int32).bitwise_xor_(buffers.MASKS[1])   # the pattern as it was
    parts = torch.cat([buffers.pattern(stop - start, 1, "cpu", start)
                       for start, stop in chunk_ranges(1000, buffers.CHUNK_ELEMS)])
    assert torch.equal(parts, whole)
    assert list(chunk_ranges(250, buffers.CHUNK_ELEMS)) == [(0, 100), (100, 200), (200, 250)]


@pytest.mark.parametrize("at", [0, 99, 100, 101, 199, 200, 999])
def test_the_chunked_check_catches_an_error_at_the_chunk_boundaries(small_chunks, at):
    good = buffers.pattern(1000, 0, "cpu")
    assert buffers.count_wrong(good, 0) == 0
    bad = good.clone()
    bad[at] = 0
    assert buffers.count_wrong(bad, 0) == 1


def test_the_chunked_check_catches_a_shift_across_chunks(small_chunks):
    import torch

    good = buffers.pattern(1000, 0, "cpu")
    shifted = torch.cat([good[4:], good[:4]])       # every element one 16-byte vector off
    assert buffers.count_wrong(shifted, 0) == 1000
    swapped = good.clone()
    swapped[96:100], swapped[100:104] = good[100:104].clone(), good[96:100].clone()   # two vectors across a boundary
    assert buffers.count_wrong(swapped, 0) == 8
    assert buffers.count_wrong(buffers.pattern(1000, 1, "cpu"), 0) == 1000   # the other direction's mask


def test_the_pattern_wraps_past_2_to_the_32_elements():
    far = buffers.pattern(4, 0, "cpu", start=(1 << 32) + 5)
    assert far.tolist() == buffers.pattern(4, 0, "cpu", start=5).tolist()
    assert all(v != 0 for v in buffers.pattern(8, 0, "cpu", start=(1 << 31) - 4).tolist())
