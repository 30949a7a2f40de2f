"""Plain-torch reference for dispatch/combine: inputs, layouts, expected results, calc_diff.

All functions work on any device; the unit tests run them on the CPU and the
family's check runs them on the GPU against what the kernels produced.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .routing import Routing

FP8_BLOCK = 128          # channels per FP8 scale (DeepEP's per-128-channel scaling)
FP8_E4M3_MAX = 448.0
ID_CHANNELS = 3          # first channels carry (rank, token) so a misplaced row is caught


def make_tokens(rank: int, num_tokens: int, hidden: int, device="cpu") -> torch.Tensor:
    """BF16 [tokens, hidden], non-zero almost everywhere, exactly representable, and
    computable by any rank: channel 0..2 hold rank+1, token%128+1, token//128+1."""
    t = torch.arange(num_tokens, device=device, dtype=torch.int64).unsqueeze(1)
    h = torch.arange(hidden, device=device, dtype=torch.int64).unsqueeze(0)
    code = (rank * 1000003 + t * 7919 + h * 104729) % 509 - 254      # |code| <= 254: exact in BF16
    x = (code.float() / 16).clone()
    if hidden >= ID_CHANNELS:
        x[:, 0] = rank + 1
        x[:, 1] = (t.squeeze(1) % 128 + 1).float()
        x[:, 2] = (t.squeeze(1) // 128 + 1).float()
    return x.to(torch.bfloat16)


def quantize_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """E4M3 values and fp32 scales per 128 channels: x ~= fp8 * scale."""
    tokens, hidden = x.shape
    if hidden % FP8_BLOCK:
        raise ValueError(f"FP8 needs hidden to be a multiple of {FP8_BLOCK}, got {hidden}")
    blocks = x.float().view(tokens, hidden // FP8_BLOCK, FP8_BLOCK)
    amax = blocks.abs().amax(-1).clamp(min=1e-4)
    scales = amax / FP8_E4M3_MAX
    fp8 = (blocks / scales.unsqueeze(-1)).to(torch.float8_e4m3fn).view(tokens, hidden)
    return fp8, scales


def dequantize_fp8(fp8: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    tokens, hidden = fp8.shape
    blocks = fp8.float().view(tokens, hidden // FP8_BLOCK, FP8_BLOCK) * scales.unsqueeze(-1)
    return blocks.view(tokens, hidden)


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """DeepEP's similarity measure: 1 - 2*sum(xy)/sum(x^2 + y^2) (0 = identical)."""
    x, y = x.double(), y.double()
    denom = (x * x + y * y).sum()
    if denom == 0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denom)


@dataclass
class SendLayout:
    """What one source rank needs to dispatch in normal mode."""

    send_pos: torch.Tensor      # int32 [tokens, ranks]: index among rows sent to that rank, -1 = not sent
    send_count: torch.Tensor    # int32 [ranks]
    expert_count: torch.Tensor  # int32 [experts]: this rank's selections per expert
    rank_weight: torch.Tensor   # float32 [tokens, ranks]: sum of the token's weights on that rank


def send_layout(routing: Routing, rank: int) -> SendLayout:
    idx, w = routing.of_rank(rank)
    in_rank = routing.token_in_rank()[rank * routing.num_tokens:(rank + 1) * routing.num_tokens]
    pos = torch.cumsum(in_rank.int(), 0) - 1
    send_pos = torch.where(in_rank, pos, torch.full_like(pos, -1)).int()
    valid = idx >= 0
    owner = torch.where(valid, idx // routing.local_experts, 0)
    rank_w = torch.zeros(routing.num_tokens, routing.num_ranks).scatter_add_(1, owner, w * valid)
    expert_count = torch.bincount(idx[valid], minlength=routing.num_experts).int()
    return SendLayout(send_pos, in_rank.sum(0).int(), expert_count, rank_w)


@dataclass
class NormalRecv:
    """What one destination rank must receive in normal mode (compact, source-major)."""

    src_rank: torch.Tensor       # int64 [rows]
    src_token: torch.Tensor      # int64 [rows]
    count_per_src: torch.Tensor  # int64 [ranks]
    expert_count: torch.Tensor   # int64 [local_experts]: selections of my experts
    topk_idx: torch.Tensor       # int64 [rows, topk]: local expert id or -1
    topk_weights: torch.Tensor   # float32 [rows, topk]: 0 where idx == -1


def normal_recv(routing: Routing, rank: int) -> NormalRecv:
    rows = routing.token_in_rank()[:, rank].nonzero().squeeze(1)   # rank-major = source-major
    src_rank, src_token = rows // routing.num_tokens, rows % routing.num_tokens
    L = routing.local_experts
    idx = routing.topk_idx[rows]
    mine = (idx >= rank * L) & (idx < (rank + 1) * L)
    local = torch.where(mine, idx - rank * L, torch.full_like(idx, -1))
    weights = torch.where(mine, routing.topk_weights[rows], torch.zeros(()))
    return NormalRecv(src_rank, src_token, torch.bincount(src_rank, minlength=routing.num_ranks),
                      routing.tokens_per_expert()[rank * L:(rank + 1) * L], local, weights)


def ll_recv(routing: Routing, rank: int) -> list[list[torch.Tensor]]:
    """Low-latency layout at one rank: [local expert][source] -> int64 token*topk + k, token order."""
    L, K, T = routing.local_experts, routing.topk_idx.shape[1], routing.num_tokens
    out = []
    for l in range(L):
        hits = (routing.topk_idx == rank * L + l).nonzero()         # rows in rank-major order
        per_src = []
        for src in range(routing.num_ranks):
            sel = hits[(hits[:, 0] // T) == src]
            per_src.append((sel[:, 0] % T) * K + sel[:, 1])
        out.append(per_src)
    return out


def expected_combine(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """combine(dispatch(x)) with identity experts: x times the sum of the token's weights."""
    return x.float() * weights.float().sum(-1, keepdim=True)


def dispatch_all(xs: list[torch.Tensor], routing: Routing) -> list[torch.Tensor]:
    """Normal-mode dispatch of every rank at once (plain torch): received rows per rank."""
    stacked = torch.cat(xs)
    return [stacked[routing.token_in_rank()[:, r]] for r in range(routing.num_ranks)]


def combine_all(ys: list[torch.Tensor], routing: Routing) -> list[torch.Tensor]:
    """Normal-mode combine of every rank at once: out[t] = sum_dst rank_weight * y_dst[row]."""
    outs = []
    for src in range(routing.num_ranks):
        lay = send_layout(routing, src)
        acc = torch.zeros(routing.num_tokens, ys[0].shape[1])
        for dst in range(routing.num_ranks):
            sent = lay.send_pos[:, dst] >= 0
            base = int(normal_recv(routing, dst).count_per_src[:src].sum())
            rows = ys[dst][base + lay.send_pos[sent, dst].long()].float()
            acc[sent] += lay.rank_weight[sent, dst:dst + 1] * rows
        outs.append(acc)
    return outs
