"""The whole MoE layer of every rank at once in plain torch (the CPU path of the tests).

Dispatch and combine are the reference layouts (reference.normal_recv, ll_recv),
the expert step is pack_ref + LocalExperts + unpack, exactly as the GPU layer
composes them; only the movement between ranks is replaced by indexing. The
unit tests compare it with the dense reference (layer_ref.py) and break it on
purpose to show the comparison catches a broken layer.
"""
from __future__ import annotations

import torch

from . import pack_ref
from . import reference as ref
from .experts import LocalExperts
from .layer_ref import expert_inputs
from .routing import Routing


def rank_experts(routing: Routing, hidden: int, inter: int, gemm: str = "auto") -> list[LocalExperts]:
    L = routing.local_experts
    return [LocalExperts(r * L, L, hidden, inter, "cpu", gemm) for r in range(routing.num_ranks)]


def _inputs(routing: Routing, hidden: int, fp8: bool) -> list[torch.Tensor]:
    return [expert_inputs(ref.make_tokens(r, routing.num_tokens, hidden), fp8)
            for r in range(routing.num_ranks)]


def layer_rows(routing: Routing, experts: list[LocalExperts], hidden: int,
               fp8: bool = False) -> list[torch.Tensor]:
    """Standard layout: rows per (source, token), weighted sums at the experts' rank,
    combine adds the returned rows (weight 1). BF16 [T, H] per source rank."""
    xs = _inputs(routing, hidden, fp8)
    outs = [torch.zeros(routing.num_tokens, hidden) for _ in range(routing.num_ranks)]
    for dst in range(routing.num_ranks):
        rec = ref.normal_recv(routing, dst)
        if len(rec.src_rank) == 0:
            continue
        x = torch.stack([xs[s][t] for s, t in zip(rec.src_rank.tolist(), rec.src_token.tolist())])
        g = pack_ref.pack_rows(x, rec.topk_idx, 0, routing.local_experts)
        ye = experts[dst].forward(g.xe, g.ends)
        y = pack_ref.unpack_rows(ye, g, rec.topk_weights).to(torch.bfloat16)
        for s in range(routing.num_ranks):
            sel = rec.src_rank == s
            outs[s].index_add_(0, rec.src_token[sel], y[sel].float())
    return [o.to(torch.bfloat16) for o in outs]


def layer_slots(routing: Routing, experts: list[LocalExperts], hidden: int,
                fp8: bool = False) -> list[torch.Tensor]:
    """Low-latency layout: one slot per (token, expert) in [L, ranks, max_tokens], unweighted
    expert outputs in the slots, the source weighs and adds them."""
    R, T, L = routing.num_ranks, routing.num_tokens, routing.local_experts
    K = routing.topk_idx.shape[1]
    xs = _inputs(routing, hidden, fp8)
    place: dict[tuple[int, int, int], tuple[int, int]] = {}   # (src, t, k) -> (dst rank, slot)
    ys = []
    for dst in range(R):
        lists = ref.ll_recv(routing, dst)
        x = torch.zeros(L * R * T, hidden, dtype=torch.bfloat16)
        counts = torch.zeros(L * R, dtype=torch.int64)
        for l in range(L):
            for s in range(R):
                tk = lists[l][s]
                base = (l * R + s) * T
                x[base:base + len(tk)] = xs[s][tk // K]
                counts[l * R + s] = len(tk)
                for i, v in enumerate(tk.tolist()):
                    place[(s, v // K, v % K)] = (dst, base + i)
        g = pack_ref.pack_slots(x, counts, R, T)
        y = torch.zeros_like(x)
        if len(g.where):
            pack_ref.unpack_slots(experts[dst].forward(g.xe, g.ends), g, y)
        ys.append(y)
    outs = []
    for s in range(R):
        idx, w = routing.of_rank(s)
        out = torch.zeros(T, hidden)
        for t in range(T):
            for k in range(K):
                if idx[t, k] >= 0:
                    dst, slot = place[(s, t, k)]
                    out[t] += w[t, k] * ys[dst][slot].float()
        outs.append(out.to(torch.bfloat16))
    return outs
