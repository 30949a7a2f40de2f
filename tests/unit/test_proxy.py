"""Proxy family on CPU: the native ring with host producers and proxy threads
(ordering, no loss, back-pressure, fault detection), planning, and the sm_90 build."""
import os
import shutil
from pathlib import Path

import pytest

from commbench import jit
from commbench.families import get_family
from commbench.families.base import Case
from commbench.suite import load_suite

ROOT = Path(__file__).resolve().parents[2]
HAVE_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc not installed: the native proxy cannot be built")


def case(op="latency", backend="proxy", size=8, ranks=1, timing="auto", **params):
    return Case(suite="t", bench="b", family="proxy", op=op, backend=backend, variant="default",
                env=(), dtype="uint8", size_bytes=size, params=tuple(sorted(params.items())),
                warmup=1, iters=2, timing=timing, ranks=ranks, ranks_per_node=ranks, timeout_s=60)


@needs_nvcc
def test_kernels_compile_for_sm90():
    jit.compile_check("proxy", arch="sm_90")


@needs_nvcc
@pytest.mark.parametrize("producers,threads,cmds,slots,batch", [
    (1, 1, 5000, 1024, 1),     # one producer, one consumer
    (6, 2, 3000, 64, 8),       # producers share rings, small ring: back-pressure
    (8, 4, 2000, 16, 4),       # more producers than slots per ring
    (3, 3, 4000, 32768, 32),   # largest ring, full warp batches
])
def test_ring_delivers_everything_in_order(producers, threads, cmds, slots, batch):
    from commbench.families.proxy.native import selftest

    r = selftest(producers, threads, cmds, slots, batch)
    assert r["timeouts"] == 0
    assert r["executed"] == producers * cmds
    assert r["lost"] == 0 and r["extra"] == 0
    assert r["order_errors"] == 0
    if slots * threads < producers * cmds // 4:
        assert r["backpressure_waits"] > 0, "a small ring must make producers wait"


@needs_nvcc
def test_ring_wraps_many_laps():
    from commbench.families.proxy.native import selftest

    # 2 producers x 20000 commands through 16 slots: > 2000 laps, the 8-bit lap tag wraps
    r = selftest(2, 1, 20000, 16, 2)
    assert (r["executed"], r["lost"], r["order_errors"], r["timeouts"]) == (40000, 0, 0, 0)


@needs_nvcc
def test_checker_sees_injected_loss():
    from commbench.families.proxy.native import selftest

    # the proxy drops every 97th command: the checker must report it, producers time out
    r = selftest(4, 2, 1000, 64, 4, drop_every=97, timeout_ms=300)
    assert r["lost"] > 0
    assert r["order_errors"] > 0
    assert r["timeouts"] > 0


@needs_nvcc
def test_engine_starts_and_stops_cleanly():
    from commbench.families.proxy.native import Engine, ProxyError

    for _ in range(3):
        eng = Engine(device=0, threads=4, slots=256, producers=16, executor="none", host_only=True)
        assert eng.counters() == {"consumed": 0, "order_errors": 0, "exec_error": 0, "stalled_threads": 0}
        assert eng.executed() == [0] * 16
        eng.close()
        eng.close()  # idempotent
    with pytest.raises(ProxyError, match="bad configuration"):
        Engine(device=0, threads=1, slots=100, producers=1, executor="none", host_only=True)


def test_unsupported_reasons():
    fam = get_family("proxy")
    assert fam.unsupported(case()) is None
    assert fam.unsupported(case(op="rate", backend="direct", size=4096, num_ctas=8)) is None
    assert "multiples of 8" in fam.unsupported(case(size=12))
    assert "nothing to deliver" in fam.unsupported(case(backend="direct", executor="none"))
    assert "ranks: 1" in fam.unsupported(case(ranks=2))
    assert "power of two" in fam.unsupported(case(ring_slots=1000))
    assert "batch" in fam.unsupported(case(batch=33))
    assert "producers" in fam.unsupported(case(op="rate", num_ctas=200, warps_per_cta=32))
    assert "op bandwidth" in fam.unsupported(case(size=256 << 20))
    assert fam.unsupported(case(op="bandwidth", size=256 << 20)) is None
    assert "chunk_bytes" in fam.unsupported(case(op="bandwidth", chunk_bytes=12))
    assert "graph" in fam.unsupported(case(timing="graph"))


def test_traffic():
    fam = get_family("proxy")
    assert fam.traffic(case(size=4096), 1).algbw_bytes == 4096
    assert fam.traffic(case(executor="none"), 1).algbw_bytes == 0
    t = fam.traffic(case(op="rate", size=8, num_ctas=2, warps_per_cta=4, cmds_per_producer=100), 1)
    assert t.algbw_bytes == 8 * 8 * 100 and t.bus_factor == 1
    assert fam.traffic(case(op="bandwidth", size=1 << 20), 1).algbw_bytes == 1 << 20


def test_suite_expands_both_paths():
    suite = load_suite(ROOT / "suites" / "proxy.yaml", gpu_count=1)
    fam = get_family("proxy")
    cases = [c for c in suite.cases if c.family == "proxy"]
    assert {c.backend for c in cases} == {"proxy", "direct"}
    assert {c.op for c in cases} == {"latency", "rate", "bandwidth"}
    assert all(fam.unsupported(c) is None for c in cases)
    threads = {dict(c.params)["proxy_threads"] for c in cases if c.bench == "delivery-rate"}
    assert threads == {1, 2, 4, 8}
    sizes = sorted({c.size_bytes for c in cases if c.op == "bandwidth"})
    assert sizes[0] == 8 and sizes[-1] == 256 << 20


@needs_nvcc
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs Linux affinity calls and at least 2 CPUs")
@pytest.mark.parametrize("mode", ["all", "inherit"])
def test_proxy_threads_escape_a_one_core_binding(mode):
    from commbench.families.proxy.bench import proxy_cpus
    from commbench.families.proxy.native import Engine

    def tasks():
        out = {}
        for status in Path("/proc/self/task").glob("*/status"):
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            out[status.parent.name] = fields.get("Cpus_allowed_list", "").strip()
        return out

    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(old)})  # what mpirun's bind-to-core does to a rank
    try:
        before = set(tasks())
        with proxy_cpus(mode):
            eng = Engine(device=0, threads=3, slots=64, producers=3, executor="none", host_only=True)
        assert os.sched_getaffinity(0) == {min(old)}  # the caller's binding is restored
        new = {tid: cpus for tid, cpus in tasks().items() if tid not in before}
        eng.close()
    finally:
        os.sched_setaffinity(0, old)
    assert len(new) == 3
    one_core = str(min(old))
    if mode == "all":
        assert all(cpus != one_core for cpus in new.values()), new
    else:
        assert all(cpus == one_core for cpus in new.values()), new
