"""The MoE layer op on the CPU: presets and planning, expert math, the expert-side
permutation, the whole layer of every rank (plain torch) against the dense
reference, and a broken layer caught by the same comparison."""
import shutil
import textwrap

import pytest
import torch

from commbench import jit
from commbench.errors import SuiteError
from commbench.families import get_family
from commbench.families.base import Case
from commbench.families.moe import layer_ref, layer_sim, pack_ref
from commbench.families.moe import reference as ref
from commbench.families.moe.experts import LocalExperts, expert_forward, expert_weights
from commbench.families.moe.layer import local_pairs, micro_batches, sub_routing
from commbench.families.moe.presets import MODELS, resolve
from commbench.families.moe.routing import generate
from commbench.suite import load_suite

H, INTER = 256, 128


@pytest.fixture(autouse=True)
def one_thread():
    # tiny CPU GEMMs: threads only contend (the CI machine is shared)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def layer_case(backend="ipc", dtype="bfloat16", ranks=2, timing="events", tokens=16, **params):
    prm = {"hidden": H, "topk": 4, "experts": 8, "intermediate": INTER, "tokens": tokens,
           "overlap": "none", "gemm": "auto", **params}
    return Case(suite="t", bench="b", family="moe", op="layer", backend=backend,
                variant="default", env=(), dtype=dtype, size_bytes=tokens * prm["hidden"] * 2,
                params=tuple(sorted(prm.items())), warmup=1, iters=2, timing=timing, ranks=ranks,
                ranks_per_node=ranks, timeout_s=60)


def write_suite(tmp_path, body: str):
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(body))
    return path


# --- presets and planning ---------------------------------------------------------------

def test_presets_fill_only_what_the_suite_left_out():
    params = {"model": "deepseek-v3", "hidden": 2048, "topk": 4, "experts": 16, "routing": "random",
              "intermediate": 512}
    out = resolve(params, explicit={"model", "hidden"})
    assert out["hidden"] == 2048                       # written in the suite: kept
    assert out["experts"] == 256 and out["topk"] == 8 and out["intermediate"] == 2048
    assert out["routing"] == "group"                   # DeepSeek-V3's group-limited router
    assert resolve({"model": "custom", "hidden": 64}, set())["hidden"] == 64


def test_suite_layer_cases_take_shape_and_tokens_from_preset_and_phase(tmp_path):
    path = write_suite(tmp_path, """
        name: layer
        defaults: {ranks: 8}
        benchmarks:
          - name: l
            family: moe
            ops: [layer]
            backends: [ipc_ll]
            params: {model: [deepseek-v3, qwen3-235b-a22b, mixtral-8x7b], phase: [prefill, decode]}
          - name: own
            family: moe
            ops: [layer]
            params: {model: mixtral-8x7b, hidden: 2048, tokens: 96}
        """)
    suite = load_suite(path, gpu_count=8)
    got = {(c.param("model"), c.param("phase")): c for c in suite.cases if c.bench == "l"}
    assert len(got) == 6
    for (model, phase), c in got.items():
        shape = MODELS[model]
        assert c.param("hidden") == shape["hidden"] and c.param("experts") == shape["experts"]
        assert c.param("topk") == shape["topk"] and c.param("intermediate") == shape["intermediate"]
        tokens = 4096 if phase == "prefill" else 128
        assert c.param("tokens") == tokens and c.size_bytes == tokens * shape["hidden"] * 2
    own = next(c for c in suite.cases if c.bench == "own")
    assert own.param("hidden") == 2048 and own.param("experts") == 8 and own.param("topk") == 2
    assert own.size_bytes == 96 * 2048 * 2
    assert len({c.case_id for c in suite.cases}) == len(suite.cases)


@pytest.mark.parametrize("bench, message", [
    ("ops: [layer]\n    sizes: [1MiB]", r"s.yaml:\d+: .*sizes: the layer op takes its tokens"),
    ("ops: [dispatch, layer]", r"s.yaml:\d+: .*ops: the layer op runs in a benchmark of its own"),
    ("ops: [dispatch]\n    sizes: [1MiB]\n    params: {overlap: two_batch}",
     r"s.yaml:\d+: .*params.overlap: applies to the layer op only"),
])
def test_layer_suite_errors_name_file_line_and_field(tmp_path, bench, message):
    path = tmp_path / "s.yaml"
    path.write_text("name: bad\nbenchmarks:\n  - name: l\n    family: moe\n    " + bench + "\n")
    with pytest.raises(SuiteError, match=message):
        load_suite(path, gpu_count=1)


def test_other_ops_keep_their_cases(tmp_path):
    """dispatch/combine Cases carry no layer parameter (ids and columns as before the layer)."""
    path = write_suite(tmp_path, """
        name: d
        benchmarks:
          - name: d
            family: moe
            ops: [dispatch]
            sizes: [896KiB]
        """)
    c = load_suite(path, gpu_count=1).cases[0]
    names = dict(c.params)
    assert not {"model", "phase", "tokens", "intermediate", "overlap", "gemm"} & set(names)


def test_presets_apply_to_dispatch_too(tmp_path):
    path = write_suite(tmp_path, """
        name: d
        benchmarks:
          - name: d
            family: moe
            ops: [dispatch]
            sizes: [1792KiB]
            params: {model: deepseek-v3}
        """)
    c = load_suite(path, gpu_count=1).cases[0]
    assert c.param("hidden") == 7168 and c.param("experts") == 256 and c.size_bytes == 1792 * 1024


def test_layer_unsupported_reasons():
    fam = get_family("moe")
    for backend in fam.backends:
        if backend not in ("deepep",):
            assert fam.unsupported(layer_case(backend=backend, hidden=2048)) is None, backend
    assert "configurations for" in fam.unsupported(layer_case(backend="uccl_ep", ranks=1))
    assert "2 or more ranks" in fam.unsupported(layer_case(backend="uccl_ep_ll", ranks=1))
    assert "UCCL-EP (DeepEP's API)'s normal dispatch" in fam.unsupported(layer_case(backend="uccl_ep",
                                                                                  timing="graph"))
    assert "runs in the layer op" in fam.unsupported(Case(**{**layer_case(backend="uccl_ep_ll").__dict__,
                                                            "op": "dispatch"}))
    assert fam.unsupported(layer_case(backend="deepep")) is None
    assert "configurations for" in fam.unsupported(layer_case(backend="deepep", ranks=1))
    assert "hidden in" in fam.unsupported(layer_case(backend="deepep_ll", hidden=256))
    assert "topk <= 11" in fam.unsupported(layer_case(backend="deepep_ll", hidden=2048, topk=12,
                                                      experts=16))
    assert "CUDA graph" in fam.unsupported(layer_case(backend="deepep", timing="graph"))
    assert "CUDA graph" in fam.unsupported(layer_case(gemm="loop", timing="graph"))
    assert fam.unsupported(layer_case(timing="graph")) is None
    assert "multiple of 8" in fam.unsupported(layer_case(intermediate=100))
    assert ">= 2 tokens" in fam.unsupported(layer_case(overlap="two_batch", tokens=1))
    assert "layer op" in fam.unsupported(Case(**{**layer_case(backend="deepep_ll").__dict__,
                                                 "op": "dispatch"}))
    assert "multiple of 128" in fam.unsupported(layer_case(dtype="float8_e4m3", hidden=200))


def test_layer_traffic_is_a_round_trip_and_deepep_ll_counts_selections():
    fam = get_family("moe")
    rt = Case(**{**layer_case(backend="ipc_ll").__dict__, "op": "round_trip"})
    assert fam.traffic(layer_case(backend="ipc_ll"), 2) == fam.traffic(rt, 2)
    # low-latency accounting: every (token, expert) choice, 16 tokens x top-4, both ways
    assert fam.traffic(layer_case(backend="deepep_ll"), 2).algbw_bytes == 2 * 16 * 4 * H * 2


# --- experts ------------------------------------------------------------------------------

def test_expert_weights_are_exact_deterministic_and_distinct():
    w13, w2 = expert_weights(3, H, INTER)
    assert w13.shape == (2 * INTER, H) and w2.shape == (H, INTER) and w13.dtype == torch.bfloat16
    again = expert_weights(3, H, INTER)
    assert torch.equal(w13, again[0]) and torch.equal(w2, again[1])
    other = expert_weights(4, H, INTER)[0]
    assert (w13 != other).float().mean() > 0.9
    # every value is an integer code times a power of two: exact in BF16 on every device
    assert torch.equal(w13.float(), w13.double().float())
    assert 0.3 < float(w13.float().std() * 9.2 * H ** 0.5) < 3     # unit-scale GEMM outputs


def test_grouped_and_loop_gemm_agree():
    x = ref.make_tokens(0, 40, H)
    ends = torch.tensor([7, 7, 30, 40], dtype=torch.int32)     # an empty group too
    grouped = LocalExperts(4, 4, H, INTER, "cpu", "auto")
    loop = LocalExperts(4, 4, H, INTER, "cpu", "loop")
    assert loop.gemm == "loop"
    want = torch.cat([expert_forward(x[s:e], *expert_weights(4 + l, H, INTER))
                      for l, (s, e) in enumerate(zip([0, 7, 7, 30], [7, 7, 30, 40]))])
    assert torch.equal(loop.forward(x, ends), want)
    if grouped.gemm == "grouped_mm":
        err = layer_ref.token_errors(grouped.forward(x, ends), want.float())
        assert float(err.max()) < 1e-2


# --- the expert-side permutation ------------------------------------------------------------

def test_pack_rows_groups_by_local_expert_and_unpacks_weighted_sums():
    x = torch.arange(5 * 8, dtype=torch.float32).view(5, 8).bfloat16()
    ids = torch.tensor([[4, 9, 5], [1, 5, -1], [6, 4, 0], [2, 3, 1], [5, 6, 7]])   # local 4..7
    w = torch.tensor([[.5, .2, .3], [.6, .4, 0], [.1, .2, .7], [.3, .3, .4], [.25, .25, .5]])
    g = pack_ref.pack_rows(x, ids, 4, 4)
    assert g.ends.tolist() == [2, 5, 7, 8]                     # experts 4: 2 rows, 5: 3, 6: 2, 7: 1
    assert torch.equal(g.xe[:2], x[[0, 2]]) and torch.equal(g.xe[2:5], x[[0, 1, 4]])
    assert g.where[3].tolist() == [-1, -1, -1] and g.where[1, 0] == -1
    ye = g.xe * 2
    out = pack_ref.unpack_rows(ye, g, w)
    assert torch.allclose(out[0], x[0].float() * 2 * (.5 + .3))
    assert torch.allclose(out[4], x[4].float() * 2 * 1.0)
    assert torch.equal(out[3], torch.zeros(8))


def test_pack_slots_skips_empty_slots_and_puts_outputs_back():
    x = torch.arange(12 * 4, dtype=torch.float32).view(12, 4).bfloat16()   # 2 experts x 2 segs x 3
    counts = torch.tensor([2, 0, 1, 3])
    g = pack_ref.pack_slots(x, counts, segs_per_expert=2, seg_rows=3)
    assert g.where.tolist() == [0, 1, 6, 9, 10, 11] and g.ends.tolist() == [2, 6]
    y = torch.zeros_like(x)
    pack_ref.unpack_slots(g.xe + 1, g, y)
    assert torch.equal(y[9], x[9] + 1) and torch.equal(y[3], torch.zeros(4))


def test_micro_batches_split_the_routing_and_the_expert_pairs():
    r = generate("zipf", num_ranks=3, num_tokens=11, num_experts=6, topk=2, seed=2)
    spans = micro_batches(11, "two_batch")
    assert spans == [(0, 6), (6, 5)] and micro_batches(11, "none") == [(0, 11)]
    parts = [sub_routing(r, s, n) for s, n in spans]
    for rank in range(3):
        whole = r.of_rank(rank)[0]
        assert torch.equal(torch.cat([p.of_rank(rank)[0] for p in parts]), whole)
        assert sum(local_pairs(p, rank) for p in parts) == local_pairs(r, rank)
    assert sum(local_pairs(r, rank) for rank in range(3)) == 3 * 11 * 2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_expert_pack_kernels_compile_for_sm90():
    jit.compile_check("moe_expert_pack", arch="sm_90")


# --- the whole layer, every rank at once, against the dense reference ------------------------

def reference_outputs(routing, fp8):
    outs = []
    for s in range(routing.num_ranks):
        idx, w = routing.of_rank(s)
        x = layer_ref.expert_inputs(ref.make_tokens(s, routing.num_tokens, H), fp8)
        outs.append(layer_ref.reference_layer(x, idx, w, H, INTER))
    return outs


def wrong_tokens(outs, expected, fp8=False):
    rtol = layer_ref.token_rtol(fp8)
    return sum(layer_ref.mismatching_tokens(o, e, rtol) for o, e in zip(outs, expected))


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("method", ["random", "group", "zipf"])
def test_layer_of_every_rank_matches_the_dense_reference(method, fp8):
    r = generate(method, num_ranks=2, num_tokens=12, num_experts=8, topk=4, seed=1, n_group=4,
                 topk_group=2)
    experts = layer_sim.rank_experts(r, H, INTER)
    expected = reference_outputs(r, fp8)
    for layout in (layer_sim.layer_rows, layer_sim.layer_slots):
        outs = layout(r, experts, H, fp8)
        worst = max(float(layer_ref.token_errors(o, e).max()) for o, e in zip(outs, expected))
        assert worst < layer_ref.token_rtol(fp8) / 2, (layout.__name__, worst)
        assert wrong_tokens(outs, expected, fp8) == 0


def test_a_broken_layer_is_caught():
    r = generate("random", num_ranks=2, num_tokens=12, num_experts=8, topk=4, seed=3)
    expected = reference_outputs(r, False)
    experts = layer_sim.rank_experts(r, H, INTER)
    assert wrong_tokens(layer_sim.layer_rows(r, experts, H), expected) == 0

    # an expert computing with another expert's weights: exactly its tokens are wrong
    swapped = layer_sim.rank_experts(r, H, INTER)
    swapped[1].w13[0], swapped[1].w2[0] = expert_weights(7, H, INTER)   # expert 4 acts as 7
    hits = int(sum((r.of_rank(s)[0] == 4).any(1).sum() for s in range(2)))
    assert wrong_tokens(layer_sim.layer_rows(r, swapped, H), expected) == hits > 0

    # one choice of one token dropped on the way (the token reaches 3 of its 4 experts)
    idx = r.topk_idx.clone()
    idx[5, 2] = -1
    dropped = type(r)(idx, r.topk_weights, r.num_ranks, r.num_tokens, r.num_experts, r.method, r.seed)
    assert wrong_tokens(layer_sim.layer_slots(dropped, experts, H), expected) == 1

    # routing weights ignored (every choice weighs 1/topk)
    flat = type(r)(r.topk_idx, torch.full_like(r.topk_weights, 0.25), r.num_ranks, r.num_tokens,
                   r.num_experts, r.method, r.seed)
    assert wrong_tokens(layer_sim.layer_rows(flat, experts, H), expected) > 0

    # two tokens' outputs exchanged
    outs = layer_sim.layer_rows(r, experts, H)
    outs[0][[0, 1]] = outs[0][[1, 0]]
    assert wrong_tokens(outs, expected) == 2


def test_mismatch_counts_nan_and_zero_rows():
    expected = torch.ones(3, 4)
    out = expected.clone()
    out[1, 0] = float("nan")
    assert layer_ref.mismatching_tokens(out, expected, 1e-2) == 1
    zero = torch.zeros(2, 4)
    assert layer_ref.mismatching_tokens(zero, zero, 1e-2) == 0
    assert layer_ref.mismatching_tokens(zero + 1, zero, 1e-2) == 2


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3"])
def test_nccl_packed_rows_carry_values_ids_and_weights_where_the_pack_reads_them(dtype):
    from commbench.families.moe.layer_nccl import packed_layout, packed_rows
    from commbench.families.moe.problem import Problem

    r = generate("random", num_ranks=2, num_tokens=6, num_experts=8, topk=4, seed=0)
    p = Problem(r, 1, dtype, H, 8)
    x = ref.make_tokens(1, 6, H)
    lay = packed_layout(p)
    rows = packed_rows(p, x)
    assert lay["width"] % 16 == 0 and rows.shape == (6, lay["width"])
    idx, w = r.of_rank(1)
    assert torch.equal(rows[:, lay["ids"]:lay["w"]].contiguous().view(torch.int32), idx.int())
    assert torch.equal(rows[:, lay["w"]:lay["w"] + 16].contiguous().view(torch.float32), w)
    if dtype == "bfloat16":
        assert torch.equal(rows[:, :2 * H].contiguous().view(torch.bfloat16), x)
    else:
        q = rows[:, :H].contiguous().view(torch.float8_e4m3fn)
        scales = rows[:, lay["scales"]:lay["ids"]].contiguous().view(torch.float32)
        got = ref.dequantize_fp8(q, scales).to(torch.bfloat16)
        assert torch.equal(got, layer_ref.expert_inputs(x, True))


# --- the layer's schedule, measurement and check, on the CPU with a loopback all2all -------------

class _Stream:
    def synchronize(self):
        pass

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass


class _Event:
    def record(self, stream=None):
        pass


class _Comm1:
    """mpi4py stand-in for one rank."""

    def allgather(self, obj):
        return [obj]

    def Barrier(self):
        pass


class _LoopbackComm:
    """One rank's all2all to itself in the standard layout (received rows = own tokens)."""

    def __init__(self, p, x, log):
        self.p, self.x, self.log = p, x, log
        self.ids, self.w = p.routing.of_rank(0)
        self.layout, self.max_rows = "rows", p.tokens
        self.out = torch.zeros(p.tokens, p.hidden, dtype=torch.bfloat16)
        self.y = torch.zeros(p.tokens, p.hidden, dtype=torch.bfloat16)
        self.source, self.sink = None, self.y

    def dispatch(self):
        self.log.append(("dispatch", self.p.tokens))
        self.source = layer_ref.expert_inputs(self.x, self.p.fp8)

    def combine(self):
        self.log.append(("combine", self.p.tokens))
        self.out.copy_(self.y)

    def failed(self):
        return ""

    def close(self):
        self.log.append(("close", self.p.tokens))


class _CpuStep:
    """ExpertStep's CPU twin (pack_ref + the same LocalExperts)."""

    def __init__(self, experts, layout, cap, topk, fp8, device, max_rows=0, num_segs=0):
        self.experts, self.cap = experts, cap

    def run(self, src, dst):
        comm = self.comm
        g = pack_ref.pack_rows(src, comm.ids, 0, self.experts.num_local)
        assert int(g.ends[-1]) == self.cap
        dst.copy_(pack_ref.unpack_rows(self.experts.forward(g.xe, g.ends), g, comm.w))

    def failed(self):
        return False


@pytest.mark.parametrize("overlap", ["none", "two_batch"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3"])
def test_layer_state_schedule_measure_and_check_on_cpu(monkeypatch, overlap, dtype):
    from commbench.comm.context import RankContext
    from commbench.families.moe import layer as layer_mod
    from commbench.measure import timing
    from commbench.world import World

    for name, value in (("Stream", lambda *a, **k: _Stream()), ("Event", lambda *a, **k: _Event()),
                        ("current_stream", lambda *a, **k: _Stream()),
                        ("synchronize", lambda *a, **k: None)):
        monkeypatch.setattr(torch.cuda, name, value)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: _nullctx())
    monkeypatch.setattr(torch.cuda, "device", lambda d: _nullctx())
    log = []

    def comm(self, backend, mp, x, ctx, group, index):
        return _LoopbackComm(mp, x, log)

    made = []

    def step(*args, **kwargs):
        made.append(_CpuStep(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(layer_mod.LayerState, "_comm", comm)
    monkeypatch.setattr(layer_mod, "ExpertStep", step)
    ticks = iter(range(1, 10000))
    monkeypatch.setitem(timing.TIMERS, "events",   # the layer times with the runner's timers
                        lambda fn, stream, iters, barrier: [fn() or float(next(ticks)) for _ in range(iters)])
    world = World(0, 1, 0, 1, 1, "h", ("h",), _Comm1())
    ctx = RankContext(world=world, device="cpu")
    # timing auto (a suite's default): the runner's rule makes it events, timed by the patched timer
    case = layer_case(backend="ipc", dtype=dtype, ranks=1, tokens=9, overlap=overlap, experts=4,
                      timing="auto")
    prm = {**{k: v.default for k, v in get_family("moe").params.items()}, **dict(case.params)}
    state = layer_mod.LayerState(case, ctx, prm)
    for mb, s in zip(state.mbs, made):
        s.comm = mb.comm
    assert [mb.comm.p.tokens for mb in state.mbs] == ([5, 4] if overlap == "two_batch" else [9])
    samples = state.measure(warmup=1, iters=3)
    assert len(samples) == 3 and state.timing_label == "events"
    ex = state.extra
    for col in ("layer_us", "serial_us", "overlap_gain"):
        assert ex[col] > 0, col
    # no GPU records on the CPU: the split is missing, and the row says why
    assert "dispatch_us" not in ex and "0 of 3 layer steps" in ex["timeline_note"]
    assert ex["grouped_gemm"] in ("grouped_mm", "loop") and ex["micro_batches"] == len(state.mbs)
    assert ex["expert_pairs"] == 9 * 4                     # one rank owns every expert
    assert state.check() == 0 and ex["max_token_err"] < layer_ref.token_rtol(dtype != "bfloat16")
    # a broken expert is caught by the same check
    state.experts.w2[1] = expert_weights(3, H, INTER)[1]
    assert state.check() > 0
    dispatches = [n for op, n in log if op == "dispatch"]
    assert set(dispatches) == {mb.comm.p.tokens for mb in state.mbs}
    state.close()
    assert [op for op, _ in log[-len(made):]] == ["close"] * len(made)


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
