"""NCCL collectives on the GPUs of this machine (one rank per GPU), through the real launcher."""
import textwrap

import pytest
from click.testing import CliRunner

from commbench import metrics
from commbench.cli import cli
from commbench.sysinfo.gpus import gpu_count
from commbench.runfolder.reader import load
from tests.conftest import needs_gpu, needs_mpi

pytestmark = [pytest.mark.gpu, needs_gpu, needs_mpi]


def _too_old_only(df) -> set[str]:
    """The nccl backend's ops skipped because the loaded NCCL predates them (gather and scatter
    before 2.28); nothing else may be skipped for that reason."""
    old = df[(df.backend == "nccl") & df.reason.astype(str).str.contains("needs nccl", case=False)]
    assert set(old.op) <= {"gather", "scatter"}, old[["op", "reason"]].to_string()
    return set(old.op)


def test_nccl_all_ops_correct(tmp_path):
    suite = tmp_path / "g.yaml"
    suite.write_text(textwrap.dedent("""\
        name: gpu-smoke
        defaults: {ranks: all, warmup: 2, iters: 5, timeout_s: 120}
        benchmarks:
          - name: nccl
            family: collectives
            backends: [nccl, torch_nccl]
            ops: [all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, sendrecv, gather, scatter]
            dtypes: [float32, bfloat16, float16, int32]
            sizes: [8B, 1MiB, 64MiB]
            params: {in_place: [false, true]}
          - name: graph
            family: collectives
            backends: [nccl, torch_nccl]
            ops: [all_reduce, alltoall]
            sizes: [1KiB]
            timing: [graph]
        """).replace("timing: [graph]", "timing: graph"))
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    df = load(out)
    bad = df[~df.status.isin(["ok", "skipped"])]
    assert bad.empty, bad[["op", "dtype", "size_bytes", "status", "reason"]].to_string()
    assert (df[df.status == "ok"].wrong == 0).all()
    assert set(df[df.status == "ok"].op) == set(metrics.COLLECTIVE_OPS)   # torch_nccl runs gather/scatter on any NCCL
    _too_old_only(df)
    assert (df.world_size == max(1, gpu_count())).all()
    graph = df[df.bench == "graph"]
    assert (graph.timing == "graph").all() and (graph.status == "ok").all()


def test_native_loop_all_ops_every_mode_and_not_slower_than_python(tmp_path):
    """The nccl backend's timed batch runs in native code in every timing mode, stays correct, and
    at 8 B (host-bound) is not slower than the Python loop."""
    suite = tmp_path / "n.yaml"
    suite.write_text(textwrap.dedent("""\
        name: native
        defaults: {ranks: all, warmup: 5, iters: 20, timeout_s: 120}
        benchmarks:
          - name: loops
            family: collectives
            backends: [nccl]
            ops: [all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, sendrecv, gather, scatter]
            sizes: [8B, 4MiB]
            timing: [events, pipelined, graph]
            params: {timed_loop: [native, python], in_place: [false, true]}
        """))
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    df = load(out)
    ok = df[df.status == "ok"]
    assert (ok.wrong == 0).all()
    assert set(ok.op) == set(metrics.COLLECTIVE_OPS) - _too_old_only(df)
    assert set(ok.timed_loop) == {"native", "python"}
    small = ok[(ok.size_bytes <= 8) & (ok.timing == "pipelined") & ~ok.in_place.astype(bool)]
    t = small.pivot_table(index="op", columns="timed_loop", values="time_us")
    assert (t["native"] <= t["python"] * 1.05).all(), t.to_string()
