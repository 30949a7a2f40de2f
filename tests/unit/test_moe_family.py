"""MoE family planning on CPU, and the kernels compile for sm_90."""
import shutil

import pytest

from commbench import jit
from commbench.families import get_family
from commbench.families.base import Case
from commbench.moe.ipc import LAYOUT_FIELDS, workspace_layout


def case(op="dispatch", backend="ipc", dtype="bfloat16", size=64 * 256 * 2, ranks=2,
         timing="events", **params):
    prm = {"hidden": 256, "topk": 4, "experts": 8, **params}
    return Case(suite="t", bench="b", family="moe", op=op, backend=backend, variant="default",
                env=(), dtype=dtype, size_bytes=size, params=tuple(sorted(prm.items())),
                warmup=1, iters=2, timing=timing, ranks=ranks, ranks_per_node=ranks, timeout_s=60)


def test_unsupported_reasons():
    fam = get_family("moe")
    assert fam.unsupported(case()) is None
    assert "BF16 only" in fam.unsupported(case(op="combine", dtype="float8_e4m3"))
    assert "multiple of the ranks" in fam.unsupported(case(ranks=3))
    assert "tokens * hidden * 2" in fam.unsupported(case(size=1000))
    assert "ipc_ll" in fam.unsupported(case(backend="nvshmem_ll"))
    assert "graph" in fam.unsupported(case(timing="graph"))
    assert "at most" in fam.unsupported(case(backend="ipc_ll", size=20000 * 512))
    assert "multiple of 128" in fam.unsupported(case(dtype="float8_e4m3", hidden=200,
                                                     size=64 * 200 * 2))


def test_traffic_uses_deepep_bytes_and_link_ratio():
    fam = get_family("moe")
    t = fam.traffic(case(backend="nccl_a2a"), 2)
    # 64 tokens per rank: each received row is 512 bytes, at most all 128 tokens arrive
    assert 0 < t.algbw_bytes <= 128 * 512 and t.algbw_bytes % 256 == 0
    assert 0 < t.bus_factor < 1          # local rows do not cross a link
    one = fam.traffic(case(backend="nccl_a2a", ranks=1), 1)
    assert one.algbw_bytes == 64 * 512 and one.bus_factor == 0


def test_workspace_layout_is_aligned_and_ordered():
    offsets, total = workspace_layout({"recv_x": 1000, "cnt_in": 8, "y": 10})
    assert list(offsets) == list(LAYOUT_FIELDS)
    assert all(v % 256 == 0 for v in offsets.values())
    assert offsets["recv_x"] < offsets["y"] and total == 256 + 1024 + 256
    with pytest.raises(ValueError):
        workspace_layout({"bogus": 1})


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", ["moe_normal", "moe_ll", "moe_ipc"])
def test_kernels_compile_for_sm90(name):
    jit.compile_check(name, arch="sm_90")
