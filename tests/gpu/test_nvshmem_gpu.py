"""nvshmem family on a GPU, one PE (loopback): every op runs through the runner and checks out.

Run: PYTHONPATH=$PWD python3 -m pytest tests/gpu/test_nvshmem_gpu.py (multi-PE runs go
through `commbench run`, which starts mpiexec; see tests/gpu/suites/nvshmem-small.yaml in tests/gpu/session.sh).
"""
import os

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

from commbench.families.base import Case  # noqa: E402

OPS = [  # (op, backend, dtype, size_bytes, params)
    ("put", "nvshmem", "float32", 1 << 20, {}),
    ("put", "nvshmem", "float32", 4096, {"scope": "thread", "nbi": False}),
    ("put", "nvshmem", "bfloat16", 65536, {"scope": "warp", "reps": 4}),
    ("get", "nvshmem", "float32", 1 << 20, {}),
    ("p", "nvshmem", "int32", 4096, {"reps": 2}),
    ("put_signal", "nvshmem", "float32", 65536, {}),
    ("put_signal", "nvshmem", "float32", 8, {}),
    ("atomic_fetch_add", "nvshmem", "uint64", 4096, {}),
    ("put_latency", "nvshmem", "float32", 8, {"threads": 32}),
    ("get_latency", "nvshmem", "float32", 4096, {"threads": 32}),
    ("pingpong", "nvshmem", "float32", 64, {"threads": 32}),
    ("put", "nvshmem_host", "float32", 1 << 20, {}),
    ("get", "nvshmem_host", "float16", 4096, {"nbi": False}),
    ("p", "nvshmem_host", "float32", 64, {}),
    ("put_signal", "nvshmem_host", "float32", 4096, {}),
    ("put", "nvshmem_host", "float32", 4096, {"timed_loop": "python"}),
    ("p", "nvshmem", "int32", 4096, {"timed_loop": "python"}),
] + [(op, be, "float32", 1 << 16, {}) for op in ("all_reduce", "all_gather", "alltoall", "broadcast",
                                                 "reduce_scatter") for be in ("nvshmem_host", "nvshmem")]


@pytest.fixture(scope="module")
def ctx():
    from commbench.measure.standalone import close_rank, open_rank

    c = open_rank()   # what a launch gives a rank: World, bound GPU, kill switches recorded
    yield c
    close_rank(c)


def make_case(op, backend, dtype, size, params, timing="auto"):
    return Case(suite="gpu", bench="t", family="nvshmem", op=op, backend=backend, variant="default",
                env=(), dtype=dtype, size_bytes=size, params=tuple(sorted(params.items())), warmup=2,
                iters=5, timing=timing, ranks=1, ranks_per_node=1, timeout_s=60)


@pytest.mark.parametrize("op,backend,dtype,size,params", OPS, ids=lambda v: str(v))
def test_op_runs_and_checks(ctx, op, backend, dtype, size, params):
    from commbench.runner import measure_case

    row, samples = measure_case(make_case(op, backend, dtype, size, params), ctx, "log")
    assert row["status"] == "ok", row["reason"]
    assert row["wrong"] == 0
    assert row["time_us"] > 0 and len(samples) == 5
    assert row["transport"] == "p2p"
    print(f"{op} {backend} {size}B: {row['time_us']:.2f} us, {row['algbw_gbps']:.2f} GB/s")


def test_check_detects_corruption(ctx):
    """The check must fail when the destination is wrong: corrupt one element after the op."""
    from commbench.families import get_family
    from commbench.families.nvshmem import buffers

    fam = get_family("nvshmem")
    state = fam.setup(make_case("put", "nvshmem", "float32", 4096, {}), ctx)
    fam.run(state)
    state.stream.synchronize()
    assert fam.check(state) == 0
    buffers.view(state.bufs.b, 4096, "float32", ctx.device)[7] = -1.0
    assert fam.check(state) == 1
    fam.teardown(state)


def test_graph_timing_for_put(ctx):
    from commbench.runner import measure_case

    row, _ = measure_case(make_case("put", "nvshmem", "float32", 1 << 16, {}, timing="graph"), ctx, "log")
    assert row["status"] == "ok", row["reason"]
    assert row["wrong"] == 0
