"""Interference family on the CPU: the GEMM's check catches a wrong product, suite validation,
and a real 2-rank gloo run measuring both ops alone and together, checked."""
import textwrap

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.errors import SuiteError
from commbench.families.interference import gemm
from commbench.runfolder.reader import load
from commbench.suite import load_suite
from tests.conftest import needs_mpi


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gemm_check_passes_right_and_catches_wrong(dtype):
    a, b, c = gemm.make(64, 48, 300, dtype, "cpu")
    gemm.run(a, b, c)
    assert float(c.float().min()) > 0          # never checked on zeros
    assert gemm.count_wrong(c, 300, dtype) == 0
    c[63, 11] = c[63, 11] * 2     # the last row is always among the sampled rows
    assert gemm.count_wrong(c, 300, dtype) == 1


def test_gloo_needs_float32(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: x\nbenchmarks:\n  - {name: a, family: interference, backends: [gloo], dtypes: [bfloat16]}\n")
    with pytest.raises(SuiteError, match="float32 only"):
        load_suite(p, gpu_count=1)


def test_shipped_suite_validates():
    s = load_suite("suites/interference.yaml", gpu_count=8)
    assert {c.family for c in s.cases} == {"interference"}
    variants = {c.variant for c in s.cases}
    assert any("NCCL_MAX_CTAS" in v for v in variants) and any("NCCL_PROTO" in v for v in variants)


@needs_mpi
def test_two_rank_cpu_run_is_correct_and_reports_slowdowns(tmp_path):
    suite = tmp_path / "i.yaml"
    suite.write_text(textwrap.dedent("""\
        name: interf
        defaults: {ranks: 2, warmup: 1, iters: 5, timeout_s: 120}
        benchmarks:
          - name: cpu
            family: interference
            backends: [gloo]
            dtypes: [float32]
            ops: [all_reduce, reduce_scatter]
            sizes: [256KiB]
            params: {gemm_m: 192, gemm_n: 160, gemm_k: 256}
        """))
    out = tmp_path / "run"
    res = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    df = load(out)
    assert (df.status == "ok").all() and (df.wrong == 0).all() and (df.timing == "overlap").all()
    for col in ("gemm_alone_us", "gemm_together_us", "comm_alone_us", "comm_together_us"):
        assert (df[col] > 0).all()
    assert (df.gemm_slowdown == df.gemm_together_us / df.gemm_alone_us).all()
    assert (df.comm_slowdown == df.comm_together_us / df.comm_alone_us).all()
    # the step runs both: it lasts at least as long as the longer of the two, iteration by iteration
    assert (df.time_us >= df[["gemm_together_us", "comm_together_us"]].min(axis=1) * 0.999).all()


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (7, 11, 13), (5, 3, 15), (16, 17, 31), (40, 9, 301)])
def test_gemm_tiles_and_period_reference_equal_the_direct_formulas(m, n, k):
    torch = pytest.importorskip("torch")
    a, b, c = gemm.make(m, n, k, "float32", "cpu")
    ks = torch.arange(k)
    assert torch.equal(a, gemm._a(torch.arange(m), ks).float())       # A[i, k] = (i + 2k) % 3 != 0
    assert torch.equal(b, gemm._b(ks, torch.arange(n)).float())       # B[k, j] = (3k + j) % 5 != 0
    gemm.run(a, b, c)
    assert torch.equal(c.double(), gemm._a(torch.arange(m), ks).double() @ gemm._b(ks, torch.arange(n)).double())
    assert gemm.count_wrong(c, k, "float32") == 0
    c[0, n - 1] += 1   # row 0 is always among the checked rows
    assert gemm.count_wrong(c, k, "float32") == 1
