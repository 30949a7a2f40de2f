"""The nvshmem family's memory plan (memory.py) on the shipped suite's Cases, the symmetric heap's
limit (static NVSHMEM_SYMMETRIC_SIZE, dynamic NVSHMEM_MAX_MEMORY_PER_GPU, the grow-only pool), and
the chunked pattern and checks (buffers.py) on CPU tensors with a small chunk."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from commbench.comm import pattern
from commbench.errors import SkipCase
from commbench.families import get_family
from commbench.families.base import Case
from commbench.families.nvshmem import buffers, coll, memory, p2p
from commbench.families.nvshmem.ops import OPS
from commbench.families.nvshmem.state import Buffers, CollState, P2PState, Pairing, Pe
from commbench.measure.memory import GIB, DeviceFree, fit_reason
from commbench.suite.loader import load_suite

ROOT = Path(__file__).resolve().parents[2]
FAMILY = get_family("nvshmem")
H100 = DeviceFree(int(79 * GIB), int(79 * GIB), "NVIDIA H100 80GB HBM3")   # free with a CUDA context
MIB = 1 << 20
HEAP_VARS = ("NVSHMEM_DISABLE_CUDA_VMM", "NVSHMEM_SYMMETRIC_SIZE", "NVSHMEM_MAX_MEMORY_PER_GPU",
             "NVSHMEM_CUMEM_GRANULARITY")


@pytest.fixture(autouse=True)
def default_heap(monkeypatch):
    """NVSHMEM's defaults, whatever this shell exports (the plan reads the launch's environment)."""
    for var in HEAP_VARS:
        monkeypatch.delenv(var, raising=False)


def make_case(op="put", backend="nvshmem", size=4096, dtype="float32", ranks=1, env=(), **params):
    return Case(suite="s", bench="b", family="nvshmem", op=op, backend=backend, variant="default", env=env,
                dtype=dtype, size_bytes=size, params=tuple(sorted(params.items())), warmup=5, iters=20,
                timing="auto", ranks=ranks, ranks_per_node=ranks, timeout_s=60)


def suite_cases(ranks: int):
    cases = load_suite(ROOT / "suites" / "nvshmem.yaml", gpu_count=ranks, overrides={"ranks": ranks}).cases
    return [c for c in cases if FAMILY.unsupported(c) is None]


def parts(plan) -> dict:
    return dict(plan.parts)


def test_memory_module_imports_no_gpu_package():
    code = ("import sys, commbench.families.nvshmem.memory; "
            "bad = [k for k in ('cupy', 'torch', 'nvshmem', 'cuda') if k in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("ranks", [1, 2])
def test_every_suite_case_has_a_plan_that_fits_an_h100(ranks):
    plans = [(FAMILY.memory_bytes(c, ranks), c) for c in suite_cases(ranks)]
    assert plans and all(plan is not None for plan, _ in plans)
    _, largest = max(plans, key=lambda pc: parts(pc[0])["symmetric buffers (NVSHMEM heap)"])
    assert (largest.op, largest.size_bytes) == ("put", 128 * MIB)   # sizes 8 B x 4^k up to 256 MiB: 128 MiB
    worst, _ = max(plans, key=lambda pc: pc[0].peak_bytes)
    assert worst.peak_bytes < GIB and fit_reason(worst, H100, 1) is None, worst.text()
    # two PEs sharing one GPU (limited MPG) halve the share and still fit
    assert fit_reason(worst, DeviceFree(H100.free_bytes, H100.free_bytes // 2, H100.name), 2) is None


def test_the_largest_put_plans_three_buffers_a_granule_and_one_chunk():
    case = next(c for c in suite_cases(2) if (c.op, c.backend, c.size_bytes) == ("put", "nvshmem", 128 * MIB))
    plan = FAMILY.memory_bytes(case, 2)
    heap = 3 * 128 * MIB + memory.MIN_BUFFER_BYTES   # a, b, c and the signal words (at least 256 B)
    assert parts(plan)["symmetric buffers (NVSHMEM heap)"] == heap
    assert parts(plan)["heap granule rounding"] == 512 * MIB - heap   # the dynamic heap maps 512 MiB granules
    assert parts(plan)["flag and timer stamps"] == 512 + 512          # 4 B flag, 26 stamps, 512 B blocks
    # the pattern's chunk, not the whole buffer's int64 index and arithmetic (24 B an element)
    assert dict(plan.transient) == {"pattern and check": buffers.CHUNK_ELEMS * buffers.P2P_PEAK_PER_ELEM}
    assert "dynamic heap" in plan.note and "NVSHMEM_MAX_MEMORY_PER_GPU" in plan.note


@pytest.mark.parametrize("op,src,dst", [("all_gather", 16, 32), ("reduce_scatter", 32, 16), ("alltoall", 32, 32),
                                        ("all_reduce", 32, 32), ("broadcast", 32, 32)])
def test_collective_buffers_follow_nccl_tests_sizes(op, src, dst):
    # the suite's largest collective (1 KiB x 8^k up to 64 MiB: 32 MiB) at 2 PEs
    case = next(c for c in suite_cases(2) if (c.op, c.size_bytes) == (op, 32 * MIB))
    assert memory.symmetric_buffers(case, 2) == {"coll_src": src * MIB, "coll_dst": dst * MIB}
    plan = FAMILY.memory_bytes(case, 2)
    chunk = min(max(src, dst) * MIB // 4, buffers.CHUNK_ELEMS)
    assert dict(plan.transient) == {"pattern and check": chunk * buffers.COLL_PEAK_PER_ELEM}


def test_small_cases_plan_their_buffers_at_least_256_bytes_each():
    plan = FAMILY.memory_bytes(make_case(size=8), 1)
    assert memory.symmetric_buffers(make_case(size=8), 1) == {"a": 256, "b": 256, "c": 256, "sig": 256}
    assert max(b for _, b in plan.transient) == 2 * buffers.P2P_PEAK_PER_ELEM   # two float32 elements
    assert plan.peak_bytes <= 512 * MIB + 4096   # at most the one granule the heap may map for them


def test_a_user_case_beyond_the_gpu_is_skipped_by_the_fit_check():
    big = make_case(size=30 << 30)   # put 30 GiB: a, b and c are 90 GiB
    assert FAMILY.unsupported(big) is None   # the dynamic heap could hold it: the GPU cannot
    plan = FAMILY.memory_bytes(big, 1)
    assert plan.peak_bytes > 90 * GIB
    reason = fit_reason(plan, H100, 1)
    assert reason and reason.startswith("needs 90.") and "free on NVIDIA H100 80GB HBM3" in reason
    assert "symmetric buffers (NVSHMEM heap) 90.0 GiB" in reason


def test_a_user_case_beyond_the_dynamic_heaps_reach_is_skipped_before_launch():
    reason = FAMILY.unsupported(make_case(size=48 << 30))   # 144 GiB of buffers: past 128 GiB of heap
    assert reason and "NVSHMEM_MAX_MEMORY_PER_GPU = 128.0 GiB" in reason and "needs 144.0 GiB" in reason
    raised = make_case(size=48 << 30, env=(("NVSHMEM_MAX_MEMORY_PER_GPU", "256G"),))
    assert FAMILY.unsupported(raised) is None


def test_a_static_heap_limits_the_case_to_nvshmem_symmetric_size(monkeypatch):
    static = (("NVSHMEM_DISABLE_CUDA_VMM", "1"),)
    case = make_case(size=512 * MIB, env=static)   # 1.5 GiB of buffers, 1 GiB of heap by default
    reason = FAMILY.unsupported(case)
    assert reason and "NVSHMEM_SYMMETRIC_SIZE = 1.0 GiB" in reason and "raise NVSHMEM_SYMMETRIC_SIZE" in reason
    assert FAMILY.unsupported(make_case(size=512 * MIB, env=static + (("NVSHMEM_SYMMETRIC_SIZE", "2G"),))) is None
    assert FAMILY.unsupported(make_case(size=256 * MIB, env=static)) is None
    plan = FAMILY.memory_bytes(make_case(size=256 * MIB, env=static), 1)
    assert "heap granule rounding" not in parts(plan) and "static heap" in plan.note
    monkeypatch.setenv("NVSHMEM_DISABLE_CUDA_VMM", "1")   # the launch's environment counts as well
    assert "NVSHMEM_SYMMETRIC_SIZE" in FAMILY.unsupported(make_case(size=512 * MIB))


def test_setup_skips_before_any_allocation_when_the_pool_and_the_case_pass_the_heap(monkeypatch):
    """The pool keeps earlier Cases' buffers: 768 MiB of put buffers and a 512 MiB all_gather pass
    a 1 GiB static heap together, though each fits alone."""
    from commbench.families.nvshmem import family as fam_module

    def no_load(*_):
        raise AssertionError("reached the kernels and the allocation")

    held = {"a": (0xA, 256 * MIB), "b": (0xB, 256 * MIB), "c": (0xC, 256 * MIB), "sig": (0x5, 256)}
    handle = SimpleNamespace(buffers=held, n_pes=2, pe=0, limited_mpg=False, load=no_load, buffer=no_load)
    monkeypatch.setattr(fam_module.shmem, "ensure", lambda ctx: handle)
    monkeypatch.setenv("NVSHMEM_DISABLE_CUDA_VMM", "1")
    gather = make_case(op="all_gather", backend="nvshmem_host", size=512 * MIB, ranks=2)
    assert FAMILY.unsupported(gather) is None   # alone it fits
    with pytest.raises(SkipCase, match="earlier Cases of this launch") as info:
        FAMILY.setup(gather, SimpleNamespace(device="cpu"))
    assert "NVSHMEM_SYMMETRIC_SIZE = 1.0 GiB" in str(info.value) and "at least 1.5 GiB" in str(info.value)
    # a Case that reuses the pool's buffers needs nothing more: set-up goes on
    with pytest.raises(AssertionError, match="reached the kernels"):
        FAMILY.setup(make_case(size=128 * MIB, ranks=2), SimpleNamespace(device="cpu"))


@pytest.mark.parametrize("raw,want", [("20m", 20 * MIB), ("3.1M", 3250586), (".5g", GIB // 2), ("1073741824", GIB),
                                      ("4G", 4 * GIB), ("1t", 1 << 40), ("", 7), ("lots", 7)])
def test_sizes_are_read_as_nvshmem_reads_them(raw, want):
    assert memory.nvshmem_size({"X": raw}, "X", 7) == want


# --- chunked patterns and checks on CPU tensors ------------------------------------------------------
@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(buffers, "CHUNK_ELEMS", 8)
    return 8


def _p2p_reference(pe: int, count: int, dtype: str):
    """The whole-buffer pattern as the family wrote it before it was chunked."""
    idx = torch.arange(count, dtype=torch.int64)
    return ((idx * 40503 + pe * 97) % buffers._P2P_MODULUS[dtype] + 1).to(getattr(torch, dtype))


def _p2p_state(op: str, target: bool, initiates: bool, dtype: str, count: int, elem: int, launches=0, pe=0):
    handle = SimpleNamespace(pe=pe, n_pes=2)
    st = P2PState(op=OPS[op], initiator="device", pe=Pe(handle, None, SimpleNamespace(barrier=lambda: None), "cpu"),
                  pair=Pairing(pe ^ 1, initiates, target), bufs=Buffers(0xA, 0xB, 0xC, 0x5), dtype=dtype, prm={},
                  size_bytes=count * elem, count=count)
    st.progress.launches = launches
    return st


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32"])
def test_p2p_pattern_in_chunks_is_the_whole_buffer_pattern(small_chunks, dtype):
    count = 8 * 5 + 3
    got = torch.zeros(count, dtype=getattr(torch, dtype))
    buffers.fill(got, lambda a, b: buffers.p2p_chunk(1, a, b, dtype, "cpu"))
    assert torch.equal(got, _p2p_reference(1, count, dtype))


def test_received_check_counts_errors_at_chunk_boundaries(small_chunks, monkeypatch):
    count = 8 * 4 + 5
    dst = _p2p_reference(1, count, "float32")   # what PE 1 put into PE 0's destination
    monkeypatch.setattr(buffers, "view", lambda ptr, size, dtype, dev: {0xB: dst}[ptr].view(getattr(torch, dtype)))
    monkeypatch.setattr(p2p, "_settle", lambda st: None)
    st = _p2p_state("put", target=True, initiates=False, dtype="float32", count=count, elem=4)
    assert p2p.check_received(st) == 0
    for i in (0, 7, 8, 15, 16, count - 1):   # both sides of each chunk edge, and the tail
        dst[i] += 1
    assert p2p.check_received(st) == 6
    st.pair = Pairing(1, True, False)   # the initiator of a put receives nothing
    assert p2p.check_received(st) == 0


def test_counter_check_counts_errors_at_chunk_boundaries(small_chunks, monkeypatch):
    count, launches, pe = 8 * 3 + 1, 4, 0
    base = torch.arange(1, count + 1, dtype=torch.int64)
    target = base + launches * (1 + 1)         # the peer (PE 1) added 2 per launch
    fetched = base + (launches - 1) * (pe + 1)  # our last fetch saw our earlier adds
    bufs = {0xB: target, 0xC: fetched}
    monkeypatch.setattr(buffers, "view", lambda ptr, size, dtype, dev: bufs[ptr])
    monkeypatch.setattr(p2p, "_settle", lambda st: None)
    st = _p2p_state("atomic_fetch_add", target=True, initiates=True, dtype="uint64", count=count, elem=8,
                    launches=launches, pe=pe)
    assert p2p.check_counted(st) == 0
    target[7] += 1
    fetched[8] -= 1
    fetched[count - 1] = 0
    assert p2p.check_counted(st) == 3


def test_counters_are_written_in_chunks(small_chunks):
    got = torch.zeros(8 * 2 + 3, dtype=torch.int64)
    buffers.fill(got, lambda a, b: buffers.counter_chunk(a, b, "cpu"))
    assert torch.equal(got, torch.arange(1, got.numel() + 1))


def _coll_reference(op: str, pe: int, n: int, c: int):
    """What the destination must hold, whole-buffer, as the family computed it before chunks."""
    if op == "all_reduce":
        return pattern.reduce_expected("sum", n, torch.arange(c))
    if op == "reduce_scatter":
        return pattern.reduce_expected("sum", n, torch.arange(c) + pe * c)
    if op == "broadcast":
        return pattern.values(0, torch.arange(c))
    if op == "all_gather":
        return torch.cat([pattern.values(r, torch.arange(c)) for r in range(n)])
    return torch.cat([pattern.values(r, torch.arange(c) + pe * c) for r in range(n)])   # alltoall


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "broadcast", "all_gather", "alltoall"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_collective_check_in_chunks_matches_the_whole_buffer_and_counts_boundary_errors(
        small_chunks, monkeypatch, op, dtype):
    n, pe, c = 4, 2, 11   # blocks of 11 elements: block edges fall inside chunks of 8
    want = _coll_reference(op, pe, n, c)
    dst = want.to(getattr(torch, dtype))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    st = CollState(op=OPS[op], initiator="host", pe=Pe(SimpleNamespace(pe=pe, n_pes=n), None,
                                                      SimpleNamespace(barrier=lambda: None), "cpu"),
                   dtype=dtype, nvshmem_count=c, src=None, dst=dst, threads=1, count=c)
    assert coll.check(st) == 0
    for i in (7, 8, dst.numel() - 1):
        dst[i] += 1
    assert coll.check(st) == 3
    dst[0] = float("nan")
    assert coll.check(st) == 4


def test_collective_source_pattern_in_chunks(small_chunks):
    src = torch.zeros(8 * 3 + 2, dtype=torch.bfloat16)
    buffers.fill(src, lambda a, b: pattern.values(3, buffers.index(a, b, "cpu")))
    assert torch.equal(src, pattern.values(3, torch.arange(src.numel())).to(torch.bfloat16))
