"""Correctness of our kernels against the plain-torch reference (untimed).

Dispatch (and round_trip): counts per source and per expert, which (rank,
token) landed in every row, routing metadata, the row bytes themselves, then
combine(dispatch(x)) within DeepEP's calc_diff threshold. Combine: every
output element against x * sum(weights), plus calc_diff.
"""
from __future__ import annotations

import torch

from . import reference as ref
from .workspace import MoeCudaError
from .peer import PeerState

# |out - ref| allowed per element after BF16 rounding of an fp32 sum (2^-7 relative).
COMBINE_RTOL = 2.0 ** -7
COMBINE_ATOL = 1e-3


def source_rows(st: PeerState, src: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows (as raw bytes/elements) and scales that rank ``src`` dispatches."""
    p = st.p
    x = ref.make_tokens(src, p.tokens, p.hidden, st.device)
    if p.fp8:
        fp8, scales = ref.quantize_fp8(x)
        return fp8.view(torch.uint8), scales
    return x.view(torch.int16), torch.zeros(p.tokens, 0, device=st.device)


def _raise_on_timeout(st: PeerState) -> None:
    if int(st.err.item()):
        raise MoeCudaError("a cross-rank wait in the MoE kernels timed out: "
                           "a peer did not arrive (see the launch log)")


def _rows_wrong(st: PeerState, got: torch.Tensor, got_scales: torch.Tensor,
                src: torch.Tensor, tok: torch.Tensor) -> int:
    """Mismatching elements between received rows and the sources' rows."""
    wrong = 0
    for s in range(st.p.ranks):
        sel = (src == s).nonzero().squeeze(1)
        if sel.numel() == 0:
            continue
        rows, scales = source_rows(st, s)
        wrong += int((got[sel] != rows[tok[sel]]).sum())
        if st.p.fp8:
            wrong += int((got_scales[sel] != scales[tok[sel]]).sum())
    return wrong


def _local_expert_counts(topk_idx: torch.Tensor, rank: int, local: int) -> torch.Tensor:
    mine = topk_idx[(topk_idx >= rank * local) & (topk_idx < (rank + 1) * local)]
    return torch.bincount(mine - rank * local, minlength=local)


def check_normal_dispatch(st: PeerState) -> int:
    p, dev = st.p, st.device
    exp = ref.normal_recv(p.routing, p.rank)
    n, K, R, L = len(exp.src_rank), p.topk, p.ranks, p.local_experts
    tags = st.read("cnt_in", (R,), torch.int64)
    wrong = int(((tags & 0xFFFFFFFF).cpu() != exp.count_per_src).sum())
    per_src_expert = st.read("expert_cnt_in", (R, L), torch.int32).cpu().long()
    expected = torch.stack([_local_expert_counts(p.routing.of_rank(s)[0], p.rank, L)
                            for s in range(R)])
    wrong += int((per_src_expert != expected).sum())
    wrong += int((per_src_expert.sum(0) != exp.expert_count).sum())
    if n == 0:
        return wrong
    src_tok = st.read("recv_src", (n, 2), torch.int32).long()
    src, tok = exp.src_rank.to(dev), exp.src_token.to(dev)
    wrong += int(((src_tok[:, 0] != src) | (src_tok[:, 1] != tok)).sum())
    wrong += int((st.read("recv_topk_idx", (n, K), torch.int32).long()
                  != exp.topk_idx.to(dev)).sum())
    wrong += int((st.read("recv_topk_w", (n, K), torch.float32)
                  != exp.topk_weights.to(dev)).sum())
    got = st.read("recv_x", (n, p.hidden), torch.uint8 if p.fp8 else torch.int16)
    got_scales = st.read("recv_scales", (n, p.num_scales), torch.float32)
    return wrong + _rows_wrong(st, got, got_scales, src, tok)


def check_ll_dispatch(st: PeerState) -> int:
    p, dev = st.p, st.device
    R, L, Tm, K = p.ranks, p.local_experts, st.max_tokens, p.topk
    lists = ref.ll_recv(p.routing, p.rank)
    counts = st.read("ll_recv_count", (L * R,), torch.int32).cpu()
    exp_counts = torch.tensor([len(lists[l][s]) for l in range(L) for s in range(R)])
    wrong = int((counts != exp_counts).sum())
    slots, tks, srcs = [], [], []
    for l in range(L):
        for s in range(R):
            n = len(lists[l][s])
            slots.append(torch.arange(n) + (l * R + s) * Tm)
            tks.append(lists[l][s])
            srcs.append(torch.full((n,), s))
    slot, tk, src = (torch.cat(v).to(dev) for v in (slots, tks, srcs))
    if slot.numel() == 0:
        return wrong
    got_tk = st.read("ll_recv_src", (L * R * Tm,), torch.int32).long()[slot]
    wrong += int((got_tk != tk).sum())
    total = L * R * Tm
    got = st.read("ll_recv_x", (total, p.hidden), torch.uint8 if p.fp8 else torch.int16)[slot]
    got_scales = st.read("ll_recv_scales", (total, p.num_scales), torch.float32)[slot]
    return wrong + _rows_wrong(st, got, got_scales, src, tk // K)


def combine_diff(st: PeerState) -> tuple[float, int]:
    """Run one combine on the current expert outputs: (calc_diff, wrong elements)."""
    st.combine()
    st.sync()
    _raise_on_timeout(st)
    expected = ref.expected_combine(st.x, st.topk_w)
    got = st.out.float()
    bad = (got - expected).abs() > COMBINE_RTOL * expected.abs() + COMBINE_ATOL
    return ref.calc_diff(got, expected), int(bad.sum())


def check(st: PeerState) -> int:
    """Wrong elements on this rank; sets extra['calc_diff'] for combine(dispatch(x))."""
    with torch.cuda.device(st.device), torch.cuda.stream(st.stream):
        if st.op in ("dispatch", "round_trip"):
            st.dispatch()
            st.sync()
            _raise_on_timeout(st)
            wrong = check_normal_dispatch(st) if st.mode == "normal" else check_ll_dispatch(st)
            st.stream.synchronize()
            st.fill_y()
            st.sync()
            diff, _ = combine_diff(st)
        else:
            diff, wrong = combine_diff(st)
        st.extra["calc_diff"] = diff
        if diff >= st.p.diff_max:
            # the round trip is off as a whole: count every output element
            wrong += st.p.tokens * st.p.hidden
        return wrong
