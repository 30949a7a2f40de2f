"""`check: bitwise` on NCCL through the real launcher: outputs compared bit for bit on the device,
at 1 rank (a result larger than one comparison chunk included) and with 2 ranks sharing the GPU
(each its own NCCL_HOSTID), where a bit flipped on rank 1 at repetition 2 (COMMBENCH_TEST_BITFLIP,
tests only) must be named. The session's larger suite: tests/gpu/suites/bitwise-nccl.yaml."""
import textwrap

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.runfolder.reader import load
from commbench.sysinfo.gpus import gpu_count
from tests.conftest import needs_gpu, needs_mpi

pytestmark = [pytest.mark.gpu, needs_gpu, needs_mpi]


def _run(tmp_path, text: str):
    suite = tmp_path / "s.yaml"
    suite.write_text(textwrap.dedent(text))
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"])
    return result, load(out)


def test_nccl_one_rank_repeats_bit_for_bit(tmp_path):
    result, df = _run(tmp_path, """\
        name: bitwise-1
        defaults: {ranks: 1, warmup: 1, iters: 3, timeout_s: 200, check: {mode: bitwise, repeats: 5}}
        benchmarks:
          - name: ops
            family: collectives
            backends: [nccl, torch_nccl]
            ops: [all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall]
            dtypes: [float32, bfloat16]
            sizes: [4KiB, 64MiB]
          - name: in-place
            family: collectives
            backends: [nccl]
            ops: [all_reduce, all_gather, reduce_scatter]
            dtypes: [float32, bfloat16]
            sizes: [4KiB, 64MiB]
            params: {in_place: true}
          - name: chunks   # 256 Mi elements: more than one comparison chunk (2^26)
            family: collectives
            backends: [nccl]
            ops: [all_reduce]
            dtypes: [bfloat16]
            sizes: [512MiB]
            params: {in_place: [false, true]}
        """)
    assert result.exit_code == 0, result.output
    ok = df[df.status == "ok"]
    assert (df.status.isin(["ok", "skipped"])).all(), df[df.status != "ok"][["op", "reason"]].to_string()
    assert len(ok) >= 30
    assert (ok.bitwise_repeats == 5).all() and (ok.bitwise_mismatch == 0).all()
    # the known answer is exact for every op here (alltoall too): no rank compared only repetitions
    assert ok.bitwise_note.isna().all(), ok.bitwise_note.dropna().unique()
    assert (ok[ok.bench == "chunks"]["count"] == 1 << 28).all()


def test_nccl_two_ranks_sharing_the_gpu_and_a_flipped_bit_named(tmp_path):
    result, df = _run(tmp_path, """\
        name: bitwise-2
        share_gpu: true
        defaults: {ranks: 2, warmup: 1, iters: 3, timeout_s: 200, check: {mode: bitwise, repeats: 4}}
        benchmarks:
          - name: clean
            family: collectives
            backends: [nccl, torch_nccl]
            ops: [all_reduce, all_gather, reduce_scatter, reduce, alltoall]
            dtypes: [float32, bfloat16]
            sizes: [4KiB, 16MiB]
          - name: injected
            family: collectives
            backends: [nccl, torch_nccl]
            ops: [all_reduce]
            dtypes: [float32, bfloat16]
            sizes: [64KiB]
            env: {COMMBENCH_TEST_BITFLIP: "1:2:5:3"}
        """)
    assert result.exit_code == 1, result.output   # the injected rows are wrong
    clean, injected = df[df.bench == "clean"], df[df.bench == "injected"]
    assert (clean.status.isin(["ok", "skipped"])).all(), clean[clean.status != "ok"][["op", "reason"]].to_string()
    ok = clean[clean.status == "ok"]
    assert len(ok) >= 16 and (ok.bitwise_mismatch == 0).all()
    if gpu_count() == 1:
        assert (ok.ranks_per_gpu == 2).all()
    assert len(injected) == 4 and (injected.status == "wrong").all(), injected[["status", "reason"]].to_string()
    assert (injected.wrong == 0).all() and (injected.bitwise_mismatch == 1).all()
    for first in injected.bitwise_first:
        assert first.startswith("rank 1 repetition 2 element 5 bit 3 (bits 0x")
