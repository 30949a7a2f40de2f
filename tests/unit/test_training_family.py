"""The training family: byte formulas, validation, the attention pieces and the check, and the
CPU suite end to end (2 ranks, gloo) with a deliberately wrong schedule that must be caught."""
import math
import textwrap

import pytest
from click.testing import CliRunner

from commbench.errors import SuiteError
from commbench.measure import step_split
from commbench.runfolder import step_timelines
from commbench.families.training import FAMILY, strategy
from commbench.families.training.bytes import bucket_sizes, bus_bytes, layer_weight_sizes, step_bytes
from commbench.families.training.shapes import problems, resolve
from commbench.suite import load_suite
from tests.conftest import ROOT, needs_mpi

TINY = {"model": "tiny", "tokens_per_rank": 64, "layers": 2}


def shape(op, world=2, dtype="float32", **params):
    return resolve({**TINY, **params}, op, dtype, world)


# --- shapes and byte formulas, by hand ------------------------------------------------------

def test_preset_and_overrides():
    s = resolve({"model": "llama3-8b"}, "fsdp", "bfloat16", 8)
    assert (s.hidden, s.ffn, s.heads, s.kv_heads, s.head_dim) == (4096, 14336, 32, 8, 128)
    assert s.layer_params == 218_103_808            # 4096*48*128 + 4096^2 + 3*4096*14336
    s = resolve({"model": "qwen2.5-72b", "ffn": 1000, "kv_heads": 16}, "tp", "bfloat16", 8)
    assert (s.hidden, s.ffn, s.heads, s.kv_heads) == (8192, 1000, 64, 16)


def test_bus_bytes_convention():
    assert bus_bytes("all_gather", 1000, 4) == 750
    assert bus_bytes("reduce_scatter", 1000, 4) == 750
    assert bus_bytes("all_reduce", 1000, 4) == 1500
    assert bus_bytes("all_to_all", 1000, 4) == 750
    assert bus_bytes("send", 1000, 2) == 1000
    assert bus_bytes("all_reduce", 1000, 1) == 0


def test_fsdp_bytes_by_hand():
    # tiny layer: 64*(4+2*2)*16 + 64*64 + 3*64*128 = 36864 weights, fp32, 2 ranks:
    # per layer 2 all-gathers and 1 reduce-scatter of 36864*4 B, each sending half of it
    per = 36864 * 4 / 2
    assert step_bytes(shape("fsdp"))["total"] == 2 * 3 * per
    assert step_bytes(shape("fsdp", reshard_after_forward=False))["total"] == 2 * 2 * per
    # bf16 gathers with fp32 reduction
    b = step_bytes(shape("fsdp", dtype="bfloat16", reduce_dtype="float32"))
    assert b["all_gather"] == 2 * 2 * 36864 * 2 / 2 and b["reduce_scatter"] == 2 * per
    # HSDP 2x2 on 4 ranks: shard group of 2, all-reduce of the 18432-element shard over 2 replicas
    h = step_bytes(shape("fsdp", world=4, replicate=2))
    assert h["all_reduce"] == 2 * (2 * 18432 * 4 * 1 / 2)
    assert h["all_gather"] == 2 * 2 * per


def test_fsdp_padding_to_the_shard_count():
    s = shape("fsdp", world=5)                      # 36864 is not a multiple of 5: padded to 36865
    assert step_bytes(s)["reduce_scatter"] == 2 * 36865 * 4 * 4 / 5


def test_distopt_buckets_and_bytes():
    s = shape("distopt", bucket_params=20000)
    sizes = layer_weight_sizes(s)
    assert sizes == [8192, 4096, 16384, 8192]
    buckets = bucket_sizes(s)
    # backward order: layer 1 down, gate+up (24576 >= 20000: close), o, qkv, layer 0 down, ...
    assert buckets[0] == [(1, 3), (1, 2)]
    assert buckets[1] == [(1, 1), (1, 0), (0, 3)]
    assert sorted(i for b in buckets for i in b) == [(layer, w) for layer in range(2) for w in range(4)]
    b = step_bytes(s)
    assert b["reduce_scatter"] == b["all_gather"] == 2 * 36864 * 4 / 2
    assert len(bucket_sizes(shape("distopt", overlap_grad_reduce=False))) == 1
    assert len(bucket_sizes(shape("distopt"))) == 1      # Megatron's 40M default holds it all
    assert "buckets=4" in strategy(s)


def test_tp_bytes_by_hand():
    act = 64 * 64 * 4                               # [tokens, hidden] fp32
    assert step_bytes(shape("tp"))["all_reduce"] == 2 * 4 * (2 * act / 2)
    sp = step_bytes(shape("tp", sequence_parallel=True))
    assert sp["all_gather"] == 2 * 6 * act / 2 and sp["reduce_scatter"] == 2 * 4 * act / 2
    assert sp["all_reduce"] == 0


def test_cp_bytes_by_hand():
    kv = 2 * 64 * 2 * 16 * 4                        # this rank's K and V: tokens x kv_heads x head_dim
    assert step_bytes(shape("cp"))["send"] == 2 * (3 * 2 - 2) * kv
    assert step_bytes(shape("cp", world=4))["send"] == 2 * (3 * 4 - 2) * kv
    assert step_bytes(shape("cp", world=1))["total"] == 0
    ag = step_bytes(shape("cp", cp_comm="all_gather", world=4))
    assert ag["all_gather"] == ag["reduce_scatter"] == 2 * 3 * kv
    a2a = step_bytes(shape("cp", cp_comm="a2a", world=4))
    qkvo = (2 * 4 + 2 * 2) * 64 * 16 * 4
    assert a2a["all_to_all"] == 2 * 2 * qkvo * 3 / 4 and a2a["send"] == 0
    mixed = step_bytes(shape("cp", cp_comm="a2a+p2p", world=4, heads=4, kv_heads=2))   # 2 x 2
    assert mixed["all_to_all"] == 2 * 2 * qkvo / 2 and mixed["send"] == 2 * (3 * 2 - 2) * kv


def test_llama8b_fsdp_bytes_match_the_parameter_count():
    s = resolve({"model": "llama3-8b", "tokens_per_rank": 8192, "layers": 2}, "fsdp", "bfloat16", 8)
    total = step_bytes(s)["total"]
    per_layer = 218_103_808 * 2 * 7 / 8              # bf16, each collective sends 7/8 of the buffer
    assert math.isclose(total, 2 * 3 * per_layer)


# --- validation -----------------------------------------------------------------------------

def test_shape_problems():
    assert problems(shape("fsdp")) == []
    assert problems(shape("cp", world=3, seq_len=100))[0][0] == "params.seq_len"
    assert "larger than the 4 attention heads" in problems(shape("tp", world=8))[0][1]
    assert problems(shape("cp", world=4, cp_comm="a2a", kv_heads=2))[0][0] == "params.cp_comm"
    assert problems(shape("cp", world=4, cp_comm="a2a+p2p", cp_a2a_size=3))[0][0] == "params.cp_a2a_size"
    assert problems(shape("fsdp", world=4, replicate=3))[0][0] == "params.replicate"
    assert problems(shape("tp", world=2, sequence_parallel=True, tokens_per_rank=63))
    assert problems(shape("fsdp", tokens_per_rank=64, seq_len=48))[0][0] == "params.seq_len"


BAD = [
    ("cp sequence does not divide", """\
        name: bad
        benchmarks:
          - name: cp
            family: training
            ops: [cp]
            ranks: 3
            params:
              model: tiny
              seq_len: 100
        """, ["bad.yaml:9:", "params.seq_len", "6 chunks"]),
    ("tp larger than heads", """\
        name: bad
        benchmarks:
          - name: tp
            family: training
            ops: [tp]
            ranks: 8
            params: {model: tiny}
        """, ["bad.yaml:6:", "(tp).ranks", "larger than the 4 attention heads"]),
    ("a2a heads not divisible", """\
        name: bad
        benchmarks:
          - name: ulysses
            family: training
            ops: [cp]
            ranks: 4
            params:
              model: llama3-8b
              kv_heads: 2
              cp_comm: [p2p, a2a]
        """, ["bad.yaml:10:", "params.cp_comm", "kv_heads (2) must be divisible by 4"]),
    ("a size sweep", """\
        name: bad
        benchmarks:
          - name: f
            family: training
            ops: [fsdp]
            sizes: [1MiB, 2MiB]
        """, ["bad.yaml:6:", "sizes", "model shape"]),
]


@pytest.mark.parametrize("desc,text,fragments", BAD, ids=[b[0] for b in BAD])
def test_bad_knobs_are_suite_errors_with_the_line(tmp_path, desc, text, fragments):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(text))
    with pytest.raises(SuiteError) as info:
        load_suite(path, gpu_count=1)
    for frag in fragments:
        assert frag in str(info.value), (frag, str(info.value))


def test_ranks_all_is_judged_against_the_gpu_count(tmp_path):
    path = tmp_path / "all.yaml"
    path.write_text("name: x\nbenchmarks:\n  - {name: tp, family: training, ops: [tp], ranks: all, "
                    "params: {model: qwen2.5-7b}}\n")
    assert load_suite(path, gpu_count=4).cases       # 28 heads, 4 kv heads: tp4 fits
    with pytest.raises(SuiteError, match="tp over 8 ranks needs heads"):
        load_suite(path, gpu_count=8)


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_shipped_suites_validate(gpus):
    for name in ("training.yaml", "training-cpu.yaml"):
        suite = load_suite(ROOT / "suites" / name, gpu_count=gpus)
        assert {c.op for c in suite.cases} == {"fsdp", "distopt", "tp", "cp"}
    cpu = load_suite(ROOT / "suites" / "training-cpu.yaml", gpu_count=gpus)
    assert {c.param("cp_comm") for c in cpu.cases if c.op == "cp"} == {"p2p", "all_gather", "a2a", "a2a+p2p"}
    assert {c.backend for c in cpu.cases} == {"gloo"} and {c.ranks for c in cpu.cases} == {2}


def test_unsupported_names_the_problem():
    from commbench.families.base import Case

    case = Case(suite="s", bench="b", family="training", op="tp", backend="gloo", variant="default",
                env=(), dtype="float32", size_bytes=1, params=(("model", "tiny"),), warmup=1, iters=2,
                timing="auto", ranks=8, ranks_per_node=8, timeout_s=10)
    assert "larger than the 4 attention heads" in FAMILY.unsupported(case)


# --- attention pieces and the comparison ----------------------------------------------------

def _chunks(t, ids, n):
    import torch

    return torch.cat([t[:, :, i * n:(i + 1) * n] for i in ids], dim=2)


@pytest.mark.parametrize("kernel", ["flash", "math"])
def test_ring_blocks_equal_full_causal_attention(kernel, monkeypatch):
    """Blocks over load-balanced chunks, merged by log-sum-exp, equal SDPA over the whole
    sequence, forward and backward (the backward of each block uses the merged output)."""
    import torch

    from commbench.families.training import attention as A

    if kernel == "math":
        monkeypatch.setattr(A, "_kernel", lambda q: "math")
    torch.manual_seed(0)
    b, h, hk, d, c, n = 2, 4, 2, 16, 3, 8
    q = torch.randn(b, h, 2 * c * n, d, requires_grad=True)
    k = torch.randn(b, hk, 2 * c * n, d, requires_grad=True)
    v = torch.randn(b, hk, 2 * c * n, d, requires_grad=True)
    ref = A.causal_attention(q, k, v)
    dout = torch.randn_like(ref)
    gq, gk, _gv = torch.autograd.grad(ref, [q, k, v], dout)
    dk_sum = torch.zeros_like(gk)
    for r in range(c):
        mine = [r, 2 * c - 1 - r]
        ql = _chunks(q.detach(), mine, n)
        acc, lse, metas = torch.zeros_like(ql), torch.full(ql.shape[:3], float("-inf")), {}
        for j in range(c):
            ids = [j, 2 * c - 1 - j]
            A.attend_chunks(ql, _chunks(k.detach(), ids, n), _chunks(v.detach(), ids, n), mine, ids, n,
                            acc, lse, metas)
        assert torch.allclose(acc, _chunks(ref.detach(), mine, n), atol=1e-5)
        dq = torch.zeros_like(ql)
        for j in range(c):
            ids = [j, 2 * c - 1 - j]
            dk, _dv = A.attend_chunks_backward(_chunks(dout, mine, n), ql, _chunks(k.detach(), ids, n),
                                               _chunks(v.detach(), ids, n), acc, lse, mine, ids, n, dq, metas)
            for pos, cid in enumerate(ids):
                dk_sum[:, :, cid * n:(cid + 1) * n] += dk[:, :, pos * n:(pos + 1) * n]
        assert torch.allclose(dq, _chunks(gq, mine, n), atol=1e-5)
    assert torch.allclose(dk_sum, gk, atol=1e-5)


def test_plan_calls():
    from commbench.families.training.attention import Call, plan_calls

    assert plan_calls([0, 3], [0, 3]) == [Call(0, 2, 0, 2, True)]          # own block: one causal call
    assert plan_calls([1, 2], [0, 3]) == [Call(0, 2, 0, 1, False)]         # earlier rank: its first chunk
    assert plan_calls([0, 3], [1, 2]) == [Call(1, 2, 0, 2, False)]         # later rank: second half sees all
    assert plan_calls([1, 2], [0, 1, 2, 3]) == [Call(0, 1, 0, 1, False), Call(1, 2, 0, 2, False),
                                                Call(0, 1, 1, 2, True), Call(1, 2, 2, 3, True)]


def test_tally():
    import torch

    from commbench.families.training.numerics import Tally

    t = Tally("bfloat16")
    x = torch.randn(1000)
    t.close("same", x + 1e-3 * torch.randn(1000), x)
    assert t.wrong == 0 and t.max_err < 1e-2
    y = x.clone()
    y[7] += 5.0                                                            # one corrupted element
    t.close("one", y, x)
    assert t.wrong == 1
    t.close("shifted", x * 1.3, x)                                         # a wrong schedule moves all
    assert t.wrong > 1 + 500 and t.where == ["one", "shifted"]
    t2 = Tally("float32")
    t2.close("nan", torch.full((4,), float("nan")), torch.ones(4))
    t2.exact("copy", torch.ones(3), torch.tensor([1.0, 2.0, 1.0]))
    assert t2.wrong == 5


def test_samples_gain_columns_when_a_case_brings_them(tmp_path):
    from commbench.runfolder import RunFolder
    from commbench.runfolder.reader import load_samples

    folder = RunFolder(tmp_path)
    folder.create(resume=False)
    base = {"case_id": "a", "rank": 0, "host": "h", "gpu": "cpu", "iteration": 0, "time_us": 1.0}
    folder.append_samples([base])
    folder.append_samples([{**base, "case_id": "b", "compute_us": 0.5, "fwd_us": 0.2}])
    df = load_samples(tmp_path)
    assert list(df.columns)[-2:] == ["compute_us", "fwd_us"]
    assert df.loc[df.case_id == "b", "compute_us"].item() == 0.5
    assert df.loc[df.case_id == "a", "compute_us"].isna().all()


# --- end to end: 2 ranks, gloo --------------------------------------------------------------

@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    from commbench.cli import cli

    out = tmp_path_factory.mktemp("training") / "run"
    result = CliRunner().invoke(cli, ["run", str(ROOT / "suites" / "training-cpu.yaml"), "--out", str(out),
                                      "--quiet"])
    assert result.exit_code == 0, result.output
    return out


@needs_mpi
def test_cpu_suite_every_op_correct(cpu_run):
    from commbench.runfolder.reader import load

    df = load(cpu_run)
    assert (df.status == "ok").all(), df[df.status != "ok"][["op", "reason"]].to_string()
    assert (df.wrong == 0).all()
    assert set(df.op) == {"fsdp", "distopt", "tp", "cp"}
    assert set(df[df.op == "cp"].cp_comm) == {"p2p", "all_gather", "a2a", "a2a+p2p"}
    # the bytes really passed to collectives equal the formula
    assert (df.comm_bytes_per_rank == df.comm_bytes_per_rank_measured).all()
    assert (df.comm_bytes_per_rank > 0).all()
    for col in ("step_us", "compute_us", "comm_us", "exposed_comm_us", "fwd_us", "bwd_us"):
        assert (df[col] > 0).all() or col == "exposed_comm_us", col
    # the split from the host timeline keeps its invariants on every row
    assert (df.exposed_comm_us >= 0).all() and (df.exposed_comm_us <= df.comm_us).all()
    assert df.overlap_pct.between(0, 100).all()
    for row in df.to_dict("records"):
        assert step_split.invariant_problems(row) == [], row["case_id"]
    assert "timeline_note" not in df.columns or df.timeline_note.isna().all()
    assert df.slowest_rank.isin([0, 1]).all() and (df.exposed_comm_sub_us >= 0).all()
    assert (df.timing == "step_host").all()
    assert df[df.op == "distopt"].optim_us.notna().all()
    for case_id in df.case_id:
        assert step_timelines.ranks_of(cpu_run, case_id) == [0, 1]
        doc = step_timelines.read(cpu_run, case_id, 1)
        assert doc["source"] == "host" and len(doc["steps"]) == 4
        assert {iv["kind"] for iv in doc["intervals"]} == {"comm", "compute"}


@needs_mpi
def test_cpu_suite_samples_and_report(cpu_run):
    from commbench.runfolder.reader import load_samples

    samples = load_samples(cpu_run)
    for col in ("compute_us", "comm_us", "exposed_comm_us", "idle_us", "compute_alone_us", "comm_alone_us",
                "fwd_us", "bwd_us"):
        assert samples[col].notna().all(), col
    assert set(samples["rank"]) == {0, 1}
    assert (cpu_run / "plots" / "training_overlap.png").stat().st_size > 1000
    assert "Training step: compute and communication" in (cpu_run / "report.md").read_text()


@needs_mpi
def test_a_schedule_computing_with_stale_data_is_caught(tmp_path):
    """Each op with fault=stale (layer 1 on layer 0's parameters, a skipped all-reduce, a ring step
    reusing the previous K/V block, parameters not updated by the all-gather) must be wrong."""
    from commbench.cli import cli
    from commbench.runfolder.reader import load

    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(ROOT / "suites" / "training-cpu.yaml"), "--out", str(out),
                                      "--quiet", "--only", "bf16", "--set", "params.fault=stale"])
    assert result.exit_code == 1, result.output     # wrong rows: `run` exits 1
    df = load(out)
    assert set(df.op) == {"fsdp", "distopt", "tp", "cp"}
    assert (df.status == "wrong").all(), df[["op", "status", "reason"]].to_string()
    assert (df.wrong > 100).all()
    assert df.check_failed.str.len().gt(0).all()


def test_report_bars_tell_apart_cases_that_differ_beyond_the_strategy():
    """Two fsdp Cases with one strategy label but another reduce dtype (or shape) get different
    bar labels; what does not vary stays off the labels."""
    import pandas as pd

    from commbench.analysis.report.training import _labels

    base = {"family": "training", "op": "fsdp", "status": "ok", "strategy": "reshard+prefetch dp2",
            "model": "tiny", "dtype": "bfloat16", "reduce_dtype": "bfloat16", "hidden": 64,
            "seq_len": 64, "step_us": 2.0, "compute_us": 1.0, "comm_us": 1.0, "exposed_comm_us": 1.0}
    rows = pd.DataFrame([base, {**base, "reduce_dtype": "float32"}])
    labels = _labels(rows)
    assert len(set(labels)) == 2 and "reduce_dtype=float32" in labels[1]
    shaped = pd.DataFrame([base, {**base, "hidden": 96, "seq_len": 32}])
    assert _labels(shaped)[1] == "reshard+prefetch dp2\nhidden=96\nseq_len=32"


@needs_mpi
def test_four_ranks_hsdp_and_hierarchical_cp(tmp_path):
    """The layouts two ranks cannot make: HSDP 2x2 (reduce-scatter, then all-reduce of the shard over
    replicas) and a2a+p2p 2x2 (all-to-all inside pairs and the ring between them), against the
    references, counted bytes equal to the formula."""
    from commbench.cli import cli
    from commbench.runfolder.reader import load

    suite = tmp_path / "four.yaml"
    suite.write_text(textwrap.dedent("""\
        name: four
        defaults: {ranks: 4, backends: [gloo], dtypes: [float32], warmup: 1, iters: 2, timeout_s: 180}
        benchmarks:
          - {name: hsdp, family: training, ops: [fsdp],
             params: {model: tiny, tokens_per_rank: 32, layers: 2, replicate: 2}}
          - {name: cp, family: training, ops: [cp],
             params: {model: tiny, tokens_per_rank: 32, layers: 2, cp_comm: a2a+p2p, cp_a2a_size: 2}}
        """))
    out = tmp_path / "run"
    res = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    df = load(out)
    assert set(df.strategy) == {"reshard+prefetch hsdp 2x2", "a2a+p2p cp4 (2x2)"}
    assert (df.status == "ok").all() and (df.wrong == 0).all(), df[["op", "status", "reason"]].to_string()
    assert (df.comm_bytes_per_rank == df.comm_bytes_per_rank_measured).all()
    assert (df.comm_bytes_per_rank > 0).all()
