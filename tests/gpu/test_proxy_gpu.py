"""GPU checks of the proxy family, each Case through the runner's measure_case.

pytest -s tests/gpu/test_proxy_gpu.py        (numbers go to $PROXY_GPU_OUT, JSON lines)
Needs one GPU; the peer executor needs two and must be skipped on one.
"""
from __future__ import annotations

import json
import os
import time
from functools import lru_cache

import pytest

torch = pytest.importorskip("torch")
NO_GPU = not torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NO_GPU, reason="no CUDA GPU: proxy GPU tests need one")]

from commbench.errors import SkipCase  # noqa: E402
from commbench.families import get_family  # noqa: E402
from commbench.comm.context import RankContext  # noqa: E402
from commbench.families.base import Case  # noqa: E402
from commbench.families.proxy import bench  # noqa: E402
from commbench.families.proxy.native import ProxyError  # noqa: E402

OUT = os.environ.get("PROXY_GPU_OUT", "/tmp/proxy_gpu.jsonl")


def make_case(op, backend, size, warmup=3, iters=20, **params):
    return Case(suite="gpu-test", bench="proxy", family="proxy", op=op, backend=backend,
                variant="default", env=(), dtype="uint8", size_bytes=size,
                params=tuple(sorted(params.items())), warmup=warmup, iters=iters, timing="auto",
                ranks=1, ranks_per_node=1, timeout_s=60)


@lru_cache(maxsize=1)
def ctx() -> RankContext:
    from commbench.measure.standalone import open_rank

    return open_rank()   # one process (MPI's singleton world), prepared as a launch prepares a rank


def measure(op, backend, size, warmup=3, iters=20, **params) -> dict:
    """The runner's own path (measure_case: set-up, timing, check, teardown); the row goes to OUT."""
    from commbench.runner import measure_case

    fam = get_family("proxy")
    case = make_case(op, backend, size, warmup, iters, **params)
    assert fam.unsupported(case) is None, fam.unsupported(case)
    t0 = time.perf_counter()
    row, _ = measure_case(case, ctx(), "gpu-test")
    row = {k: v for k, v in row.items() if v is not None}
    row["wall_s"] = round(time.perf_counter() - t0, 3)   # the whole Case, set-up included
    assert row["status"] in ("ok", "wrong"), row
    with open(OUT, "a") as fh:
        fh.write(json.dumps(row) + "\n")
    print(row)
    return row


def test_delivery_latency():
    row = measure("latency", "proxy", 8, warmup=200, iters=5000, executor="none")
    assert row["wrong"] == 0 and row["commands_checked"] == 5204
    assert 0.1 < row["latency_p50_us"] < 1000


@pytest.mark.parametrize("backend", ["proxy", "direct"])
@pytest.mark.parametrize("executor", ["device", "host"])
@pytest.mark.parametrize("size", [8, 65536])
def test_transfer_latency(backend, executor, size):
    row = measure("latency", backend, size, warmup=20, iters=300, executor=executor)
    assert row["wrong"] == 0
    assert row["time_us"] > 0


@pytest.mark.parametrize("threads,ctas,warps,batch", [(1, 1, 1, 1), (1, 8, 4, 32), (4, 32, 4, 32),
                                                      (8, 132, 4, 32), (8, 132, 8, 32)])
def test_delivery_rate(threads, ctas, warps, batch):
    row = measure("rate", "proxy", 8, warmup=2, iters=10, executor="none", proxy_threads=threads,
                  num_ctas=ctas, warps_per_cta=warps, batch=batch,
                  cmds_per_producer=1024 if ctas < 32 else 256)
    assert row["wrong"] == 0 and row["order_errors"] == 0
    assert row["rate_mops"] > 0


@pytest.mark.parametrize("backend,threads", [("proxy", 1), ("proxy", 4), ("direct", 1)])
def test_copy_rate(backend, threads):
    row = measure("rate", backend, 4096, warmup=2, iters=10, executor="device", proxy_threads=threads,
                  num_ctas=8, warps_per_cta=4, batch=32, cmds_per_producer=128)
    assert row["wrong"] == 0


@pytest.mark.parametrize("backend,size,executor", [
    ("proxy", 256 << 20, "device"), ("direct", 256 << 20, "device"),
    ("proxy", 64 << 20, "host"), ("direct", 64 << 20, "host"),
    ("proxy", 8, "device"), ("direct", 8, "device"), ("proxy", 300 * 1024 + 8, "device")])
def test_bandwidth(backend, size, executor):
    prm = ({"num_ctas": 4, "warps_per_cta": 4, "chunk_bytes": 4 << 20, "proxy_threads": 4}
           if backend == "proxy" else {"num_ctas": 132, "warps_per_cta": 16, "chunk_bytes": 65536})
    row = measure("bandwidth", backend, size, warmup=2, iters=10, executor=executor, **prm)
    assert row["wrong"] == 0
    row_gbps = size / row["time_us"] / 1e3
    print(f"bandwidth {backend} {executor} {size} B: {row_gbps:.1f} GB/s")


def test_stalled_proxy_fails_not_hangs():
    fam = get_family("proxy")
    case = make_case("rate", "proxy", 8, executor="none", inject_stall_after=100, timeout_ms=200,
                     num_ctas=2, warps_per_cta=2, ring_slots=64)
    st = fam.setup(case, ctx())
    t0 = time.perf_counter()
    try:
        with pytest.raises(ProxyError, match="ring stayed full|completions never arrived"):
            fam.run(st)        # the runner's timed batch of a rate Case: one launch
            fam.check(st)      # the check reads the kernel's error flag first
        with pytest.raises(ProxyError, match="unusable"):
            fam.run(st)
    finally:
        fam.teardown(st)
    assert time.perf_counter() - t0 < 10


def test_check_catches_corrupted_data(monkeypatch):
    fam = get_family("proxy")
    case = make_case("bandwidth", "proxy", 1 << 20, executor="device", chunk_bytes=65536, num_ctas=2)
    st = fam.setup(case, ctx())
    original = bench.launch

    def corrupting_launch(s, *a, **k):
        original(s, *a, **k)
        with torch.cuda.stream(s.stream):
            s.dst[:64].zero_()

    try:
        for _ in range(2):
            fam.run(st)
        st.stream.synchronize()
        monkeypatch.setattr(bench, "launch", corrupting_launch)
        assert fam.check(st) >= 32
    finally:
        fam.teardown(st)


def test_peer_executor_needs_two_gpus():
    if torch.cuda.device_count() >= 2:
        row = measure("bandwidth", "direct", 1 << 20, executor="peer", num_ctas=16, chunk_bytes=65536)
        assert row["wrong"] == 0
        return
    fam = get_family("proxy")
    with pytest.raises(SkipCase, match="needs 2 GPUs"):
        fam.setup(make_case("latency", "proxy", 8, executor="peer"), ctx())
