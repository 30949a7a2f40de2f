"""nvshmem family on CPU: planning, skip logic, formulas, suites, kernel compile for sm_90."""
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.errors import SkipCase
from commbench.families import get_family
from commbench.families.base import Case, RankContext
from commbench.comm import nvshmem as boot
from commbench.families.nvshmem import coll, p2p
from commbench.suite import group_launches, load_suite

ROOT = Path(__file__).resolve().parents[2]
FAMILY = get_family("nvshmem")


def make_case(op="put", backend="nvshmem", size=4096, dtype="float32", ranks=2, timing="auto", **params):
    return Case(suite="s", bench="b", family="nvshmem", op=op, backend=backend, variant="default", env=(),
                dtype=dtype, size_bytes=size, params=tuple(sorted(params.items())), warmup=1, iters=2,
                timing=timing, ranks=ranks, ranks_per_node=ranks, timeout_s=60)


def test_import_pulls_no_gpu_package():
    code = ("import sys, commbench.families.nvshmem.family, "
            "commbench.families.nvshmem.p2p, commbench.families.nvshmem.coll; "
            "bad = [k for k in ('cupy', 'torch', 'nvshmem', 'cuda') if k in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("case,needle", [
    (make_case(op="atomic_fetch_add", dtype="float32"), "uint64"),
    (make_case(op="put", dtype="uint64", size=64), "uint64"),
    (make_case(op="atomic_fetch_add", dtype="uint64", backend="nvshmem_host"), "no host-initiated"),
    (make_case(op="pingpong", backend="nvshmem_host"), "in-kernel"),
    (make_case(op="put", ranks=3), "odd"),
    (make_case(op="p", size=6, dtype="bfloat16"), "multiple of 4"),
    (make_case(op="p", size=8192, backend="nvshmem_host"), "4 KiB"),
    (make_case(op="all_gather", size=12, ranks=2), "split evenly"),
    (make_case(op="put", size=6), "multiple"),
    (make_case(op="put_signal", timing="graph"), "graph"),
    (make_case(op="put", scope="warp", threads=48), "multiple of 32"),
])
def test_unsupported_reasons(case, needle):
    reason = FAMILY.unsupported(case)
    assert reason and needle in reason


@pytest.mark.parametrize("case", [
    make_case(), make_case(op="get", backend="nvshmem_host"), make_case(op="all_reduce", ranks=3, size=12),
    make_case(op="atomic_fetch_add", dtype="uint64", size=8), make_case(op="pingpong", ranks=1),
    make_case(op="alltoall", size=64, ranks=4), make_case(op="p", backend="nvshmem_host", size=4096),
])
def test_supported_cases(case):
    assert FAMILY.unsupported(case) is None


@pytest.mark.parametrize("op,n,factor", [("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75),
                                         ("all_gather", 4, 0.75), ("alltoall", 8, 0.875),
                                         ("broadcast", 8, 1.0), ("reduce_scatter", 2, 0.5)])
def test_collective_traffic_matches_nccl_tests(op, n, factor):
    size = 1 << 20
    t = FAMILY.traffic(make_case(op=op, size=size, ranks=n), n)
    assert t.bus_factor == pytest.approx(factor)
    assert t.algbw_bytes == size  # nccl-tests: algbw = size_bytes / t for all of these


def test_p2p_traffic():
    assert FAMILY.traffic(make_case(size=1000, reps=20), 2).algbw_bytes == 20000
    assert FAMILY.traffic(make_case(size=1000, direction="bi"), 2).algbw_bytes == 2000
    assert FAMILY.traffic(make_case(size=1000, direction="bi", ranks=1), 1).algbw_bytes == 1000
    assert FAMILY.traffic(make_case(op="pingpong", size=64), 2).algbw_bytes == 128
    assert FAMILY.traffic(make_case(op="put_signal", size=64, reps=9), 2).algbw_bytes == 64


def test_pairing():
    assert p2p.pairing(0, 1, "uni") == (0, True, True)
    assert p2p.pairing(0, 2, "uni") == (1, True, False)
    assert p2p.pairing(1, 2, "uni") == (0, False, True)
    assert p2p.pairing(3, 4, "bi") == (2, True, True)


@pytest.mark.parametrize("size,ctas,want", [(8, 4, 1), (64, 4, 4), (48, 4, 3), (1 << 20, 4, 4), (100, 1, 1)])
def test_signals_per_launch_matches_kernel_chunking(size, ctas, want):
    assert p2p.signals_per_launch(size, ctas, "nvshmem") == want
    assert p2p.signals_per_launch(size, ctas, "nvshmem_host") == 1


def test_msgs_per_op():
    prm = {"reps": 2, "threads": 64, "scope": "warp", "num_ctas": 4}
    assert p2p.msgs_per_op("put", 1 << 20, prm) == 4 * 2 * 2
    assert p2p.msgs_per_op("p", 64, prm) == 32
    assert p2p.msgs_per_op("atomic_fetch_add", 64, prm) == 8


def test_collective_buffer_counts():
    assert coll.buffer_counts("all_gather", 10, 4) == (10, 40, 10)
    assert coll.buffer_counts("reduce_scatter", 10, 4) == (40, 10, 10)
    assert coll.buffer_counts("alltoall", 10, 4) == (40, 40, 10)
    assert coll.buffer_counts("all_reduce", 10, 4) == (10, 10, 10)


@pytest.mark.parametrize("name", ["nvshmem.yaml", "nvshmem-ibrc-vs-ibgda.yaml"])
def test_suites_validate_and_expand(name):
    suite = load_suite(ROOT / "suites" / name, gpu_count=2)
    assert suite.cases and all(c.family == "nvshmem" for c in suite.cases)
    assert all(FAMILY.unsupported(c) is None for c in suite.cases)
    launches = group_launches(suite.cases)
    if name.startswith("nvshmem-ibrc"):
        envs = {dict(lc.env).get("NVSHMEM_IB_ENABLE_IBGDA") for lc in launches}
        assert envs == {"0", "1"}  # each transport variant is its own launch (NVSHMEM reads env at init)
        assert all(dict(lc.env)["NVSHMEM_DISABLE_P2P"] == "1" for lc in launches)


def _install_or_skip():
    try:
        return boot.find_install()
    except boot.NvshmemNotFound as exc:
        pytest.skip(f"NVSHMEM headers not installed (pip install nvidia-nvshmem-cu13): {exc}")


@pytest.mark.parametrize("name", ["nvshmem_boot", "nvshmem_ops", "nvshmem_coll"])
def test_kernels_build_and_link_for_sm90(name, tmp_path, monkeypatch):
    from commbench import jit

    try:
        jit.find_nvcc()
    except jit.JitError as exc:
        pytest.skip(str(exc))
    inst = _install_or_skip()
    monkeypatch.setenv("COMMBENCH_JIT_CACHE", str(tmp_path))
    lib = jit.build(name, flags=boot.compile_flags(inst), libs=boot.link_args(inst), arch="sm_90")
    syms = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    prefix = {"nvshmem_boot": "cb_boot_init", "nvshmem_ops": "cb_ops_attach", "nvshmem_coll": "cb_coll_host"}
    assert prefix[name] in syms


def test_host_put_signal_is_skipped_under_limited_mpg_before_any_nvshmem_call():
    """NVSHMEM exits the process for nvshmemx_signal_wait_until_on_stream in limited MPG."""
    from types import SimpleNamespace

    from commbench.families.nvshmem import p2p

    def no_load(*_):
        raise AssertionError("must skip before loading the kernels")

    handle = SimpleNamespace(limited_mpg=True, load=no_load)
    with pytest.raises(SkipCase, match="limited MPG"):
        p2p.setup(make_case("put_signal", backend="nvshmem_host"), None, handle, {})


def test_device_reduce_scatter_beyond_half_the_scratch_is_skipped():
    """Seen on 2x H200: 4 MiB reduce_scatter hit NVSHMEM's scratch assert and killed both ranks."""
    assert coll.reduce_scratch_bytes({}) == 512 * 1024
    assert coll.reduce_scratch_bytes({"NVSHMEM_REDUCE_SCRATCH_SIZE": "64M"}) == 64 << 20
    assert coll.reduce_scratch_bytes({"NVSHMEM_REDUCE_SCRATCH_SIZE": "1048576"}) == 1 << 20
    # 64 KiB input over 2 PEs passed there, 4 MiB failed
    assert coll.device_reduce_scatter_problem(8192, 4, 2, {}) is None
    assert "NVSHMEM_REDUCE_SCRATCH_SIZE" in coll.device_reduce_scatter_problem(524288, 4, 2, {})
    assert coll.device_reduce_scatter_problem(524288, 4, 2, {"NVSHMEM_REDUCE_SCRATCH_SIZE": "8M"}) is None
    assert coll.device_reduce_scatter_problem(524288, 4, 1, {}) is None   # one PE copies
