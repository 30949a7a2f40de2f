"""MoE family planning on CPU, and the kernels compile for sm_90."""
import re
import shutil
import subprocess

import pytest

from commbench import jit
from commbench.families import get_family
from commbench.families.base import Case
from commbench.families.moe.peer import workspace_sizes
from commbench.families.moe.problem import make_problem
from commbench.families.moe.workspace import LAYOUT_FIELDS, workspace_layout


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
    # every backend of ours runs under CUDA-graph timing (epochs live on the device)
    for backend in ("ipc", "ipc_ll", "nvshmem_ll"):
        assert fam.unsupported(case(backend=backend)) is None
        assert fam.unsupported(case(backend=backend, timing="graph")) is None
    for backend in ("ipc_ll", "nvshmem_ll"):
        assert "at most" in fam.unsupported(case(backend=backend, size=20000 * 512))
    assert fam.unsupported(case(backend="ipc", size=20000 * 512)) is None
    assert "1..32" in fam.unsupported(case(topk=33, experts=64))
    assert "exceeds the experts" in fam.unsupported(case(topk=9))
    assert "num_sms" in fam.unsupported(case(num_sms=0))
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


def test_a_cases_routing_is_built_once_for_setup_and_traffic(monkeypatch):
    """The rank's problem (set-up) and the byte accounting after timing share one routing."""
    from commbench.families.moe import routing

    fam = get_family("moe")
    built = []
    real = routing.generate
    monkeypatch.setattr(routing, "generate", lambda *a, **k: built.append(k) or real(*a, **k))
    routing._cached.cache_clear()
    c = case(backend="nccl_a2a")
    prm = {k: c.param(k, spec.default) for k, spec in fam.params.items()}
    problem = make_problem(c.size_bytes, prm, 0, 2, c.dtype)
    fam.traffic(c, 2)
    assert len(built) == 1 and built[0]["num_tokens"] == problem.tokens == 64
    fam.traffic(case(backend="nccl_a2a", seed=1), 2)   # another Case: its own routing
    assert len(built) == 2 and built[1]["seed"] == 1


def test_workspace_layout_is_aligned_and_ordered():
    offsets, total = workspace_layout({"recv_x": 1000, "cnt_in": 8, "y": 10})
    assert list(offsets) == list(LAYOUT_FIELDS)
    assert all(v % 256 == 0 for v in offsets.values())
    assert offsets["recv_x"] < offsets["y"] and total == 256 + 1024 + 256
    with pytest.raises(ValueError):
        workspace_layout({"bogus": 1})


def test_layout_fields_match_the_cuda_struct():
    """LAYOUT_FIELDS is passed to moe::Layout as an array: same names, same order."""
    src = (jit.kernels_dir() / "moe_common.cuh").read_text()
    body = re.search(r"struct Layout \{(.*?)\};", src, re.S).group(1)
    assert tuple(re.findall(r"long long (\w+);", body)) == LAYOUT_FIELDS


def _problem(ranks=2, dtype="bfloat16", tokens=64, hidden=256):
    prm = {"hidden": hidden, "topk": 4, "experts": 8, "routing": "random", "seed": 0,
           "n_group": 8, "topk_group": 4, "zipf_s": 1.2, "num_sms": 4}
    return make_problem(tokens * hidden * 2, prm, 0, ranks, dtype)


def test_low_latency_workspace_by_hand():
    p = _problem(dtype="float8_e4m3")   # 2 ranks, 4 local experts, 64 tokens, FP8 rows of 256 B
    sizes = workspace_sizes(p, "ll", max_tokens=100)
    slots = 4 * 2 * 100
    assert sizes["ll_recv_x"] == slots * 256 and sizes["ll_recv_scales"] == slots * 2 * 4
    assert sizes["ll_y"] == slots * 256 * 2 and sizes["ll_comb_buf"] == 100 * 4 * 256 * 2
    assert sizes["ll_comb_cnt"] == 8 * 8            # one u64 signal per expert (per_expert combine)
    assert sizes["ll_comb_flag"] == 8 * 100 * 4      # one u64 flag per returned row [token][k]
    assert "ll_send_x" not in sizes                  # CUDA IPC puts read the input in place
    staged = workspace_sizes(p, "ll", max_tokens=100, staged=True)
    assert staged["ll_send_x"] == 64 * 256 and staged["ll_send_scales"] == 64 * 2 * 4


def test_ll_variants_from_the_environment(monkeypatch):
    from commbench.families.moe import peer

    monkeypatch.delenv(peer.COMBINE_VARIANT_VAR, raising=False)
    monkeypatch.delenv(peer.DISPATCH_VARIANT_VAR, raising=False)
    assert (peer.combine_variant(), peer.dispatch_variant()) == ("rows", "flat")
    monkeypatch.setenv(peer.COMBINE_VARIANT_VAR, "per_expert")
    monkeypatch.setenv(peer.DISPATCH_VARIANT_VAR, "staged")
    assert peer.COMBINE_VARIANTS[peer.combine_variant()] == 1
    assert peer.DISPATCH_VARIANTS[peer.dispatch_variant()] == 0
    monkeypatch.setenv(peer.COMBINE_VARIANT_VAR, "send_only")   # a timing part, not a variant
    with pytest.raises(ValueError, match="per_expert"):
        peer.combine_variant()


def _enum(header: str, name: str) -> dict[str, int]:
    import re

    from commbench import jit

    text = (jit.kernels_dir() / header).read_text()
    body = re.search(r"enum %s \{(.*?)\};" % name, text, re.S).group(1)
    snake = lambda camel: re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()   # noqa: E731
    return {snake(m.group(1)): int(m.group(2)) for m in re.finditer(r"k\w*?(?:Combine|Dispatch)(\w+) = (\d+)", body)}


def test_ll_variants_match_the_kernel_enums():
    from commbench.families.moe import peer

    assert _enum("moe_ll_combine.cuh", "CombineVariant") == {**peer.COMBINE_VARIANTS,
                                                             **peer.COMBINE_PARTS}
    assert not set(peer.COMBINE_PARTS) & set(peer.COMBINE_VARIANTS)   # never from the environment
    assert _enum("moe_ll_kernels.cuh", "DispatchVariant") == {**peer.DISPATCH_VARIANTS,
                                                               **peer.DISPATCH_PARTS}
    assert not set(peer.DISPATCH_PARTS) & set(peer.DISPATCH_VARIANTS)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("name", ["moe_normal", "moe_ll"])
def test_kernels_compile_for_sm90(name):
    jit.compile_check(name, arch="sm_90")


@pytest.mark.slow   # links NVSHMEM device code: minutes of nvcc on 2 cores
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvshmem_low_latency_kernels_build_and_link_for_sm90(tmp_path, monkeypatch):
    from commbench.comm import nvshmem as paths

    try:
        inst = paths.find_install()
    except paths.NvshmemNotFound as exc:
        pytest.skip(f"NVSHMEM headers not installed (pip install nvidia-nvshmem-cu13): {exc}")
    monkeypatch.setenv("COMMBENCH_JIT_CACHE", str(tmp_path))
    lib = jit.build("moe_ll_nvshmem", flags=paths.compile_flags(inst), libs=paths.link_args(inst),
                    arch="sm_90")
    syms = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                          text=True).stdout
    for sym in ("moe_shmem_attach", "moe_shmem_ll_dispatch", "moe_shmem_ll_combine"):
        assert sym in syms


def test_round_trip_is_dispatch_plus_combine():
    fam = get_family("moe")
    assert fam.unsupported(case(op="round_trip", dtype="float8_e4m3")) is None   # FP8 out, BF16 back
    for backend in ("ipc", "ipc_ll", "nccl_a2a", "nccl_agrs"):
        for dtype in ("bfloat16", "float8_e4m3"):
            d = fam.traffic(case(op="dispatch", backend=backend, dtype=dtype), 2)
            c = fam.traffic(case(op="combine", backend=backend), 2)
            r = fam.traffic(case(op="round_trip", backend=backend, dtype=dtype), 2)
            assert r.algbw_bytes == d.algbw_bytes + c.algbw_bytes
            link = d.algbw_bytes * d.bus_factor + c.algbw_bytes * c.bus_factor
            assert abs(r.algbw_bytes * r.bus_factor - link) < 1e-6 * link


def test_ll_rows_record_the_variant_that_ran(monkeypatch):
    from commbench.families.moe import peer, routing
    from commbench.families.moe.family import _columns

    fam = get_family("moe")

    def columns(backend):
        c = case(backend=backend)
        prm = {k: c.param(k, spec.default) for k, spec in fam.params.items()}
        return _columns(c, routing.for_case(prm, 64, 2), prm["hidden"])

    monkeypatch.delenv(peer.COMBINE_VARIANT_VAR, raising=False)
    monkeypatch.delenv(peer.DISPATCH_VARIANT_VAR, raising=False)
    assert columns("ipc_ll")["ll_variant"] == "dispatch=flat,combine=rows"
    monkeypatch.setenv(peer.COMBINE_VARIANT_VAR, "per_expert")
    monkeypatch.setenv(peer.DISPATCH_VARIANT_VAR, "staged")
    assert columns("nvshmem_ll")["ll_variant"] == "dispatch=staged,combine=per_expert"
    for backend in ("ipc", "nccl_a2a"):   # not the low-latency kernels: no column
        assert "ll_variant" not in columns(backend)
    assert peer.ll_variant_label("staged", "rows_fenced") == "dispatch=staged,combine=rows_fenced"
