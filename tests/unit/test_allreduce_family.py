"""allreduce family on CPU: planning, formulas, data pattern, suite, kernel compile for sm_90."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.families.allreduce import cb_backend, data
from commbench.families import get_family
from commbench.families.base import Case

ROOT = Path(__file__).resolve().parents[2]
FAMILY = get_family("allreduce")


def make_case(backend="cb_one_shot", size=1024, dtype="float32", ranks=2, rpn=2):
    return Case(suite="s", bench="b", family="allreduce", op="all_reduce", backend=backend,
                variant="default", env=(), dtype=dtype, size_bytes=size, params=(("allow_multicast", False),),
                warmup=1, iters=2, timing="auto", ranks=ranks, ranks_per_node=rpn, timeout_s=60)


def test_import_pulls_no_gpu_package():
    code = ("import sys, commbench.families.allreduce.family as m; "
            "bad = [k for k in ('cupy', 'torch', 'nvshmem', 'cuda') if k in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_declared_interface():
    assert FAMILY.ops == ("all_reduce",)
    assert set(FAMILY.backends) == {"nccl", "nccl_symm", "torch_one_shot", "torch_two_shot",
                                    "torch_multimem", "cb_one_shot", "cb_two_shot"}
    assert FAMILY.params["allow_multicast"].default is False
    assert FAMILY.params["peer_memory"].choices == ("ipc", "torch_symm")


@pytest.mark.parametrize("n,factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_traffic_matches_nccl_tests(n, factor):
    t = FAMILY.traffic(make_case(size=1 << 20), n)
    assert t.algbw_bytes == float(1 << 20)
    assert t.bus_factor == pytest.approx(factor)


def test_unsupported_reasons():
    assert FAMILY.unsupported(make_case(size=1024)) is None
    assert "whole number" in FAMILY.unsupported(make_case(size=6))
    assert "whole number" in FAMILY.unsupported(make_case(size=1, dtype="bfloat16"))
    assert FAMILY.unsupported(make_case(size=2, dtype="bfloat16")) is None
    assert "not supported" in FAMILY.unsupported(make_case(dtype="float16"))
    assert "at most 8 ranks" in FAMILY.unsupported(make_case(ranks=16, rpn=16))
    assert "one node" in FAMILY.unsupported(make_case("torch_two_shot", ranks=4, rpn=2))
    assert FAMILY.unsupported(make_case("nccl", ranks=16, rpn=8)) is None  # NCCL spans nodes


def test_validate_bench():
    assert FAMILY.bench_problems({"params": {"num_ctas": [16, 32], "threads_per_cta": 512}}) == []
    problems = dict(FAMILY.bench_problems({"params": {"num_ctas": [0, 65], "threads_per_cta": 100}}))
    assert set(problems) == {"params.num_ctas", "params.threads_per_cta"}


@pytest.mark.parametrize("size,n", [(8, 2), (1024, 4), (1 << 20, 8), (48, 3), (1 << 20, 1)])
def test_layout_pads_to_vectors_and_equal_chunks(size, n):
    lay = cb_backend.layout(size, n, flag_bytes=2304)
    vec_bytes = lay["num_vecs"] * 16
    assert vec_bytes >= size and lay["num_vecs"] % n == 0
    assert vec_bytes - size < 16 * n  # never more than one vector per rank of padding
    assert lay["input"] >= 2304 and lay["input"] % 256 == 0
    assert lay["scratch"] >= lay["input"] + vec_bytes and lay["scratch"] % 256 == 0
    assert lay["total"] == lay["scratch"] + vec_bytes // n


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_data_pattern_sums_exactly_and_catches_errors(dtype, n):
    torch = pytest.importorskip("torch")
    count = 1000
    parts = []
    for rank in range(n):
        t = torch.empty(count, dtype=data.torch_dtype(dtype))
        data.fill_input(t, rank)
        assert bool((t != 0).all())  # never check on zeros
        parts.append(t)
    total = torch.zeros(count, dtype=torch.float32)
    for t in parts:
        total += t.float()
    out = total.to(data.torch_dtype(dtype))
    assert data.count_wrong(out, n, dtype) == 0
    out[17] += 1
    out[999] = 0
    assert data.count_wrong(out, n, dtype) == 2
    assert data.count_wrong(parts[0], n, dtype) > 0 or n == 1  # an un-reduced input is wrong


def test_suite_expands_and_gates(monkeypatch):
    from commbench.suite import load_suite

    for key in ("NCCL_NVLS_ENABLE", "NVSHMEM_DISABLE_NVLS", "TORCH_SYMM_MEM_DISABLE_MULTICAST"):
        monkeypatch.delenv(key, raising=False)
    suite = load_suite(ROOT / "suites" / "allreduce-algos.yaml", gpu_count=8)
    backends = {c.backend for c in suite.cases}
    assert backends == set(FAMILY.backends)
    sizes = sorted({c.size_bytes for c in suite.cases})
    assert sizes[0] == 8 and sizes[-1] == 8 * 1024**3
    algos = {c.env_dict.get("NCCL_ALGO") for c in suite.cases if c.backend == "nccl"}
    assert algos == {None, "Ring", "Tree", "PAT", "CollNet", "NVLS", "NVLSTree"}
    assert all(c.ranks == 8 for c in suite.cases)
    # NCCL has no PAT all-reduce, and CollNet needs its plugin: skipped with the reason (comm/nccl_algos.py)
    forced_off = {c.case_id for c in suite.cases if FAMILY.unsupported(c)}
    assert {c.env_dict.get("NCCL_ALGO") for c in suite.cases if c.case_id in forced_off} == {"PAT", "CollNet"}
    monkeypatch.setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    skipped = [c for c in suite.cases if FAMILY.unsupported(c) and c.case_id not in forced_off]
    assert {c.bench for c in skipped} == {"nccl-nvls", "torch-multimem"}


@pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                    reason="nvcc not installed: cannot compile-check kernels/allreduce.cu")
def test_kernel_compiles_for_sm90():
    from commbench import jit

    jit.compile_check("allreduce", arch="sm_90")


def test_nccl_cases_declare_their_debug_log_for_the_launch(tmp_path):
    """NCCL reads NCCL_DEBUG* once, at its first communicator: the launch sets them, not the family."""
    env = FAMILY.launch_env(make_case("nccl"), {}, tmp_path / "logs")
    assert env["NCCL_DEBUG"] == "INFO" and "TUNING" in env["NCCL_DEBUG_SUBSYS"]
    assert env["NCCL_DEBUG_FILE"] == str(tmp_path / "logs" / "nccl" / "nccl-%h-%p.log")
    mine = {"NCCL_DEBUG": "TRACE", "NCCL_DEBUG_SUBSYS": "NET", "NCCL_DEBUG_FILE": "/mine/%p.log"}
    kept = FAMILY.launch_env(make_case("nccl_symm"), mine, tmp_path)
    assert kept == {"NCCL_DEBUG_SUBSYS": "NET,TUNING"}   # a user's own settings stay
    assert FAMILY.launch_env(make_case("cb_one_shot"), {}, tmp_path) == {}


def test_the_launch_merges_what_families_declare(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from commbench.launch.prepare import variant_env
    from commbench.suite.launches import Launch, declared_env

    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    monkeypatch.delenv("NCCL_DEBUG_FILE", raising=False)
    cases = [make_case("cb_one_shot"), make_case("nccl")]
    assert declared_env(cases[:1], {}, tmp_path) == {}
    assert declared_env(cases, {}, tmp_path)["NCCL_DEBUG"] == "INFO"
    launch = Launch(launch_id=0, ranks=2, ranks_per_node=2, env=(("NCCL_DEBUG", "WARN"), ("NCCL_ALGO", "Ring")),
                    variant="default", case_ids=tuple(c.case_id for c in cases))
    env = variant_env(SimpleNamespace(path=tmp_path), launch, cases)
    assert env["NCCL_ALGO"] == "Ring" and env["NCCL_DEBUG"] == "INFO"   # as the family set it in-process before
    assert env["NCCL_DEBUG_FILE"].startswith(str(tmp_path / "logs" / "nccl"))
    assert launch.env == (("NCCL_DEBUG", "WARN"), ("NCCL_ALGO", "Ring"))   # the group's identity is unchanged


def test_data_pattern_is_written_and_checked_across_chunk_boundaries(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(data, "CHUNK_ELEMS", 6)   # 100 elements: 17 chunks, the last one short
    n, count = 3, 100
    parts = []
    for rank in range(n):
        t = torch.zeros(count, dtype=torch.float32)
        data.fill_input(t, rank)
        assert bool((t == (torch.arange(count) % data.PERIOD + rank + 1)).all())
        parts.append(t)
    out = sum(parts)
    assert data.count_wrong(out, n, "float32") == 0
    for i in (5, 6, 99):   # the last of a chunk, the first of the next, the very last
        out[i] += 1
    assert data.count_wrong(out, n, "float32") == 3
