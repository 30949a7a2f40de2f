"""MoE routing generators, plain-torch reference and byte accounting (CPU)."""
import pytest
import torch

from commbench.families.moe import reference as ref
from commbench.families.moe.bytes import moe_bytes, token_bytes
from commbench.families.moe.routing import Routing, generate


def small(method="random", ranks=2, tokens=16, experts=8, topk=2, seed=3, **kw):
    return generate(method, num_ranks=ranks, num_tokens=tokens, num_experts=experts, topk=topk,
                    seed=seed, **kw)


@pytest.mark.parametrize("method", ["random", "group", "zipf"])
def test_generators_are_seeded_and_valid(method):
    a, b = small(method, n_group=4, topk_group=2), small(method, n_group=4, topk_group=2)
    assert torch.equal(a.topk_idx, b.topk_idx) and a.seed == 3
    assert not torch.equal(a.topk_idx, small(method, seed=4, n_group=4, topk_group=2).topk_idx)
    assert a.topk_idx.shape == (32, 2)
    assert int(a.topk_idx.min()) >= 0 and int(a.topk_idx.max()) < 8
    # k distinct experts per token, weights normalised
    assert all(len(set(row.tolist())) == 2 for row in a.topk_idx)
    assert torch.allclose(a.topk_weights.sum(1), torch.ones(32))


def test_group_limited_uses_at_most_topk_group_groups():
    r = small("group", tokens=64, experts=16, topk=4, n_group=4, topk_group=2)
    groups = r.topk_idx // 4
    assert max(len(set(g.tolist())) for g in groups) <= 2


def test_zipf_is_skewed():
    flat = small("random", tokens=512, experts=32, topk=2).imbalance()
    skew = small("zipf", tokens=512, experts=32, topk=2, zipf_s=1.5).imbalance()
    assert skew["expert_load_max_over_mean"] > 2 * flat["expert_load_max_over_mean"]


def hand_routing():
    # 2 ranks x 2 tokens, 4 experts (2 per rank), top-2; expert e lives on rank e // 2
    idx = torch.tensor([[0, 1], [1, 2], [3, 2], [0, 3]])
    w = torch.tensor([[0.5, 0.5], [0.25, 0.75], [0.6, 0.4], [0.1, 0.9]])
    return Routing(idx, w, num_ranks=2, num_tokens=2, num_experts=4, method="hand", seed=0)


def test_layout_by_hand():
    r = hand_routing()
    assert r.token_in_rank().tolist() == [[True, False], [True, True], [False, True], [True, True]]
    assert r.tokens_per_rank().tolist() == [3, 3]
    assert r.tokens_per_expert().tolist() == [2, 2, 2, 2]
    lay = ref.send_layout(r, 1)
    assert lay.send_pos.tolist() == [[-1, 0], [0, 1]]
    assert lay.send_count.tolist() == [1, 2]
    assert torch.allclose(lay.rank_weight, torch.tensor([[0.0, 1.0], [0.1, 0.9]]))
    recv = ref.normal_recv(r, 1)
    assert recv.src_rank.tolist() == [0, 1, 1] and recv.src_token.tolist() == [1, 0, 1]
    assert recv.count_per_src.tolist() == [1, 2]
    assert recv.expert_count.tolist() == [2, 2]
    assert recv.topk_idx.tolist() == [[-1, 0], [1, 0], [-1, 1]]
    ll = ref.ll_recv(r, 1)          # [local expert][source] -> token*2 + k
    assert [t.tolist() for t in ll[1]] == [[], [0, 3]]
    assert [t.tolist() for t in ll[0]] == [[3], [1]]


def test_combine_of_dispatch_is_weighted_identity():
    r = small(ranks=3, tokens=8, experts=6, topk=2)
    xs = [ref.make_tokens(s, 8, 16) for s in range(3)]
    ys = ref.dispatch_all(xs, r)
    assert [y.shape[0] for y in ys] == r.tokens_per_rank().tolist()
    outs = ref.combine_all(ys, r)
    for s in range(3):
        expected = ref.expected_combine(xs[s], r.of_rank(s)[1])
        assert ref.calc_diff(outs[s], expected) < 1e-10
    # a wrong row is caught
    ys[0][0] += 1
    assert any(ref.calc_diff(o, ref.expected_combine(x, r.of_rank(s)[1])) > 1e-6
               for s, (o, x) in enumerate(zip(ref.combine_all(ys, r), xs)))


def test_tokens_are_exact_nonzero_and_identify_the_row():
    x = ref.make_tokens(5, 300, 64)
    assert torch.equal(x.float().to(torch.bfloat16), x)
    assert (x != 0).float().mean() > 0.99
    assert x[:, 0].eq(6).all() and x[299, 1] == 299 % 128 + 1 and x[299, 2] == 299 // 128 + 1


def test_calc_diff_and_fp8():
    x = ref.make_tokens(0, 32, 256).float()
    assert ref.calc_diff(x, x) == 0.0
    assert ref.calc_diff(x, -x) == pytest.approx(2.0)
    fp8, scales = ref.quantize_fp8(x)
    assert scales.shape == (32, 2)
    assert 0 < ref.calc_diff(ref.dequantize_fp8(fp8, scales), x) < 5e-4


def test_byte_accounting_by_hand():
    r = hand_routing()
    H = 256
    assert token_bytes("bfloat16", H) == 512 and token_bytes("float8_e4m3", H) == 256 + 8
    # normal: 3 rows received per rank; remote rows: rank0 gets 1 from rank1, rank1 gets 1 from rank0
    b = moe_bytes(r, "dispatch", "nccl_a2a", "bfloat16", H)
    assert b.deepep_bytes == 3 * 512 and b.link_bytes == 1 * 512 and b.rows == 3
    f = moe_bytes(r, "dispatch", "ipc", "float8_e4m3", H)
    assert f.deepep_bytes == 3 * 264 and f.link_bytes == 1 * (264 + 8 + 2 * 8)
    c = moe_bytes(r, "combine", "ipc", "float8_e4m3", H)
    assert c.deepep_bytes == 3 * 512 and c.link_bytes == 512
    # low latency: 4 selections sent per rank; 1 of each rank's goes to the other rank
    ll = moe_bytes(r, "dispatch", "ipc_ll", "float8_e4m3", H)
    assert ll.deepep_bytes == 4 * (264 + 16) and ll.link_bytes == 1 * (264 + 4)
    llc = moe_bytes(r, "combine", "ipc_ll", "bfloat16", H)
    assert llc.deepep_bytes == 4 * 512 and llc.link_bytes == 1 * 512
    ag = moe_bytes(r, "dispatch", "nccl_agrs", "bfloat16", H)
    assert ag.link_bytes == 1 * 2 * 512
