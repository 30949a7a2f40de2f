"""Profiling on the GPU machine (issue 17): NCCL loads commbench's profiler plugin (its init shows in
NCCL_DEBUG=INFO output), profiled runs stay correct, one rank says "no events (1 rank)" and several
ranks record every collective; torch traces hold GPU activity; interference runs on one GPU."""
import json
import textwrap

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.sysinfo.gpus import gpu_count
from commbench.runfolder.reader import load
from tests.conftest import needs_gpu, needs_mpi

pytestmark = [pytest.mark.gpu, needs_gpu, needs_mpi]


def _run(tmp_path, text: str, *args: str):
    suite = tmp_path / "s.yaml"
    suite.write_text(textwrap.dedent(text))
    out = tmp_path / "run"
    res = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", *args])
    assert res.exit_code == 0, res.output
    return out, load(out)


def test_nccl_loads_the_plugin_and_profiled_runs_stay_correct(tmp_path):
    out, df = _run(tmp_path, """\
        name: p
        defaults: {ranks: all, warmup: 3, iters: 10, timeout_s: 180, sizes: [64KiB, 4MiB]}
        benchmarks:
          - name: prof
            family: collectives
            backends: [nccl]
            ops: [all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, sendrecv]
            env: {NCCL_DEBUG: INFO, NCCL_DEBUG_SUBSYS: "INIT,ENV"}
        """, "--profile", "nccl")
    assert (df.status == "ok").all(), df[["op", "status", "reason"]]
    assert (df.wrong == 0).all() and (df.profiled == "nccl").all()
    log = "".join(p.read_text(errors="replace") for p in (out / "logs").glob("launch-*.log"))
    assert "commbench profiler: init comm" in log          # NCCL loaded it and called init
    inits = [json.loads(ln) for p in (out / "traces" / "nccl").glob("*.jsonl")
             for ln in p.read_text().splitlines() if '"kind":"init"' in ln]
    assert inits and all(d["abi"] == 5 for d in inits)
    n = max(1, gpu_count())
    if n == 1:
        # NCCL 2.28.9 emits no events for most 1-rank ops; for a few (seen on 1x H200, 2026-12-01:
        # an all_reduce and sendrecv Case) it emits some, not one set per iteration: no kernel_us then
        partial = df.profile_note.str.startswith("tasks do not divide evenly")
        assert (df.profile_note == "no events (1 rank)").sum() >= len(df) // 2, df[["op", "profile_note"]]
        assert ((df.profile_note == "no events (1 rank)") | partial).all(), df[["op", "profile_note"]]
        assert df.loc[partial, "kernel_us"].isna().all()
    else:
        assert (df.kernel_us > 0).all() and (df.nccl_channels >= 1).all(), df[["op", "kernel_us", "profile_note"]]
        assert df.nccl_algo.notna().all()
        assert df.skew_us.notna().all() and df.late_rank.notna().all()


def test_torch_trace_on_the_gpu(tmp_path):
    out, df = _run(tmp_path, """\
        name: t
        defaults: {ranks: all, warmup: 2, iters: 5, timeout_s: 180}
        benchmarks:
          - name: torch
            family: collectives
            backends: [torch_nccl]
            ops: [all_reduce]
            sizes: [1MiB]
            profile: torch
        """)
    row = df.iloc[0]
    assert row.status == "ok" and row.wrong == 0 and row.profiled == "torch"
    doc = json.loads((out / row.trace).read_text())
    cats = {e.get("cat") for e in doc["traceEvents"]}
    assert cats & {"kernel", "gpu_memcpy", "cuda_runtime", "cuda_driver"}, cats
    assert any(str(e.get("name", "")).startswith("commbench timed x5") for e in doc["traceEvents"])


def test_interference_on_one_gpu(tmp_path):
    _out, df = _run(tmp_path, """\
        name: i
        defaults: {ranks: 1, warmup: 2, iters: 10, timeout_s: 180}
        benchmarks:
          - name: hbm
            family: interference
            backends: [nccl]
            dtypes: [bfloat16]
            ops: [all_reduce, all_gather]
            sizes: [256MiB]
            params: {gemm_m: 8192, gemm_n: 8192, gemm_k: 8192}
        """)
    assert (df.status == "ok").all(), df[["op", "status", "reason"]]
    assert (df.wrong == 0).all()
    assert (df.gemm_slowdown > 0.8).all() and (df.comm_slowdown > 0.8).all()
    assert (df.gemm_tflops_alone > 50).all()     # an H100/H200 bf16 GEMM of this shape runs far above this
    print(df[["op", "gemm_alone_us", "gemm_together_us", "comm_alone_us", "comm_together_us", "gemm_slowdown",
              "comm_slowdown", "gemm_tflops_alone"]].to_string())
