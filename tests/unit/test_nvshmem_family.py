"""nvshmem family on CPU: planning, skip logic, formulas, suites, kernel compile for sm_90."""
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.errors import SkipCase
from commbench.families import get_family
from commbench.families.base import Case
from commbench.comm import nvshmem as boot
from commbench.families.nvshmem import coll, p2p
from commbench.families.nvshmem.ops import OPS
from commbench.suite import group_launches, load_suite

ROOT = Path(__file__).resolve().parents[2]
FAMILY = get_family("nvshmem")


def make_case(op="put", backend="nvshmem", size=4096, dtype="float32", ranks=2, timing="auto", **params):
    return Case(suite="s", bench="b", family="nvshmem", op=op, backend=backend, variant="default", env=(),
                dtype=dtype, size_bytes=size, params=tuple(sorted(params.items())), warmup=1, iters=2,
                timing=timing, ranks=ranks, ranks_per_node=ranks, timeout_s=60)


def test_import_pulls_no_gpu_package():
    code = ("import sys, commbench.families.nvshmem.family, commbench.families.nvshmem.native, "
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
    assert p2p.signals_per_launch(size, ctas, "device") == want
    assert p2p.signals_per_launch(size, ctas, "host") == 1


def test_msgs_per_op():
    prm = {"reps": 2, "threads": 64, "scope": "warp", "num_ctas": 4}
    assert p2p.msgs_per_op(OPS["put"], 1 << 20, prm) == 4 * 2 * 2
    assert p2p.msgs_per_op(OPS["p"], 64, prm) == 32
    assert p2p.msgs_per_op(OPS["atomic_fetch_add"], 64, prm) == 8
    assert p2p.msgs_per_op(OPS["put_signal"], 1 << 20, prm) == 1


def test_collective_buffer_counts():
    assert coll.buffer_counts(OPS["all_gather"], 10, 4) == (10, 40, 10)
    assert coll.buffer_counts(OPS["reduce_scatter"], 10, 4) == (40, 10, 10)
    assert coll.buffer_counts(OPS["alltoall"], 10, 4) == (40, 40, 10)
    assert coll.buffer_counts(OPS["all_reduce"], 10, 4) == (10, 10, 10)


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


@pytest.mark.slow   # links NVSHMEM device code: minutes of nvcc on 2 cores
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

    def no_load(*_):
        raise AssertionError("must skip before loading the kernels")

    handle = SimpleNamespace(limited_mpg=True, load=no_load)
    with pytest.raises(SkipCase, match="limited MPG"):
        p2p.setup(make_case("put_signal", backend="nvshmem_host"), None, handle, {}, OPS["put_signal"])


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


# --- the op table -------------------------------------------------------------------------------
def _entry_table(op):
    if op.kind == "coll":
        return coll.CALLS
    return p2p.LOOPS if op.in_kernel else p2p.CALLS


def test_every_op_of_the_family_has_a_row_and_reads_only_its_params():
    assert set(FAMILY.ops) == set(OPS)
    for op in OPS.values():
        assert set(op.reads) <= set(FAMILY.params), op.name
        assert set(op.dtypes) <= set(FAMILY.dtypes), op.name
        assert ("timed_loop" in op.reads) == bool(getattr(op, "native", {})), op.name


@pytest.mark.parametrize("name", sorted(OPS))
def test_each_entry_a_row_names_is_called_declared_and_exported_by_its_kernel(name):
    op = OPS[name]
    source = (ROOT / "kernels" / ("nvshmem_coll.cu" if op.kind == "coll" else "nvshmem_ops.cu")).read_text()

    class Lib:   # records the argtypes _declare gives each entry
        def __getattr__(self, attr):
            fn = type("Fn", (), {})()
            setattr(self, attr, fn)
            return fn

    lib = Lib()
    (coll if op.kind == "coll" else p2p)._declare(lib)
    assert set(op.entries) <= {"device", "host"}
    for initiator, entry in op.entries.items():
        assert entry in _entry_table(op), (name, entry)
        assert hasattr(lib.__dict__.get(entry), "argtypes"), f"{entry} has no ctypes signature"
        assert f"int {entry}(" in source, f"{entry} not exported by the kernel source"


def test_a_row_without_a_host_form_says_why_and_host_only_ops_do_not_exist():
    for op in OPS.values():
        assert ("host" in op.entries) == (not op.device_only), op.name
        assert "device" in op.entries, op.name


def test_native_kinds_and_collective_codes_match_the_kernels():
    from commbench.families.nvshmem import native

    for op in OPS.values():
        if op.kind == "p2p":
            assert set(op.native) <= set(op.entries) and set(op.native.values()) <= set(native.KINDS), op.name
            assert not (op.in_kernel and op.native), op.name
    source = (ROOT / "kernels" / "nvshmem_coll.cu").read_text()
    for op in OPS.values():
        if op.kind == "coll":
            assert f"OP_{op.name.upper()} = {op.code}" in source, op.name


def test_rows_drive_the_check_and_the_receiver():
    assert OPS["get"].is_get and OPS["get_latency"].is_get and not OPS["put"].is_get
    assert OPS["pingpong"].receiver == "both" and OPS["pingpong"].every_pe
    assert OPS["put_signal"].check is p2p.check_signalled
    assert OPS["atomic_fetch_add"].check is p2p.check_counted and OPS["atomic_fetch_add"].counters
    assert all(op.check is coll.check and op.expect is not None for op in OPS.values() if op.kind == "coll")


class _Recorder:
    """A kernels library stand-in: every entry records its arguments and returns 0."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, entry):
        return lambda *args: self.calls.append((entry, args)) or 0


def _p2p_state(name, initiator, pe=0, n=2, direction="uni", **prm):
    from types import SimpleNamespace

    from commbench.families.nvshmem.state import Buffers, P2PState, Pairing, Pe

    prm = {"scope": "warp", "nbi": True, "reps": 3, "num_ctas": 4, "threads": 64, "direction": direction, **prm}
    handle = SimpleNamespace(pe=pe, n_pes=n)
    err = SimpleNamespace(data_ptr=lambda: 0xE, item=lambda: 0)
    st = P2PState(op=OPS[name], initiator=initiator, pe=Pe(handle, _Recorder(), None, "cpu"),
                  pair=Pairing(*p2p.pairing(pe, n, direction)), bufs=Buffers(0xA, 0xB, 0xC, 0x5),
                  dtype="float32", prm=prm, size_bytes=4096, count=1024)
    st.progress.err = err
    return st


@pytest.mark.parametrize("name,initiator,pe,want", [
    ("put", "device", 0, ("cb_rma_bw", (0xB, 0xA, 4096, 1, 1, 1, 0, 3, 4, 64, 7))),
    ("get", "host", 0, ("cb_host_rma", (0xB, 0xA, 4096, 1, 1, 1, 7))),
    ("p", "device", 0, ("cb_p", (0xB, 0xA, 1024, 1, 3, 4, 64, 7))),
    ("atomic_fetch_add", "device", 0, ("cb_fetch_add", (0xB, 0xC, 512, 1, 1, 4, 64, 7))),
    # the target enqueues too: no send, waits for the signals of this launch (4 CTAs own bytes)
    ("put_signal", "device", 1, ("cb_put_signal", (0xB, 0xA, 4096, 0x5, 0, 0, 4, p2p.TIMEOUT_NS, 0xE, 4, 64, 7))),
    ("put_signal", "host", 1, ("cb_host_put_signal", (0xB, 0xA, 4096, 0x5, 0, 0, 1, 7))),
])
def test_run_calls_the_rows_entry_with_its_arguments(monkeypatch, name, initiator, pe, want):
    import torch
    from types import SimpleNamespace

    monkeypatch.setattr(torch.cuda, "current_stream", lambda: SimpleNamespace(cuda_stream=7))
    st = _p2p_state(name, initiator, pe=pe)
    p2p.run(st)
    assert st.pe.lib.calls == [want] and st.progress.launches == 1


def test_run_leaves_a_passive_target_idle_but_counts_the_launch(monkeypatch):
    import torch
    from types import SimpleNamespace

    monkeypatch.setattr(torch.cuda, "current_stream", lambda: SimpleNamespace(cuda_stream=7))
    st = _p2p_state("put", "device", pe=1)
    p2p.run(st)
    assert st.pe.lib.calls == [] and st.progress.launches == 1


@pytest.mark.parametrize("name,initiator,want", [
    ("reduce_scatter", "device", ("cb_coll_device", (4, 1, 0xD, 0x5, 16, 128, 7))),
    ("alltoall", "host", ("cb_coll_host", (2, 1, 0xD, 0x5, 16, 7))),
])
def test_collective_run_passes_the_rows_code(monkeypatch, name, initiator, want):
    import torch
    from types import SimpleNamespace

    from commbench.families.nvshmem.state import CollState, Pe

    monkeypatch.setattr(torch.cuda, "current_stream", lambda: SimpleNamespace(cuda_stream=7))
    st = CollState(op=OPS[name], initiator=initiator, pe=Pe(None, _Recorder(), None, "cpu"), dtype="bfloat16",
                   nvshmem_count=16, src=SimpleNamespace(data_ptr=lambda: 0x5),
                   dst=SimpleNamespace(data_ptr=lambda: 0xD), threads=128)
    coll.run(st)
    assert st.pe.lib.calls == [want]
