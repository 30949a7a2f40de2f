"""Byte accounting for dispatch/combine.

Two figures per (op, backend):

- ``deepep_bytes``: DeepEP's logical bytes, so GB/s compare with its tables.
  Normal mode counts received rows (BF16 2*H, FP8 H + H/128*4 per token);
  low-latency counts every (token, expert) selection a rank sends (FP8 adds
  16 bytes of metadata; combine is always BF16). Local rows count too.
- ``link_bytes``: what the backend actually moves between ranks, local rows
  excluded, including the metadata our kernels write.

Both are the mean over ranks of per-rank bytes (the runner divides by the
slowest rank's time).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .shape import FP8_BLOCK
from .routing import Routing

LOW_LATENCY_BACKENDS = ("ipc_ll", "nvshmem_ll", "deepep_ll", "uccl_ep_ll")
LL_FP8_META_BYTES = 16   # DeepEP low-latency: per-message metadata in its FP8 accounting
NORMAL_META_BYTES = 8    # (source rank, source token) per received row
LL_META_BYTES = 4        # token*topk + k per message


def token_bytes(dtype: str, hidden: int) -> int:
    """Bytes of one dispatched row: BF16 2*H; FP8 H plus one fp32 scale per 128 channels."""
    if dtype == "bfloat16":
        return 2 * hidden
    if dtype == "float8_e4m3":
        return hidden + hidden // FP8_BLOCK * 4
    raise ValueError(f"unknown MoE dtype {dtype!r}")


@dataclass(frozen=True)
class MoeBytes:
    deepep_bytes: float   # mean over ranks
    link_bytes: float     # mean over ranks
    rows: float           # mean over ranks: rows (normal) or messages (low latency) handled


def _self_rows(routing: Routing) -> torch.Tensor:
    """Normal mode: tokens each rank sends to itself."""
    T = routing.num_tokens
    in_rank = routing.token_in_rank()
    return torch.stack([in_rank[r * T:(r + 1) * T, r].sum() for r in range(routing.num_ranks)])


def _selections(routing: Routing) -> tuple[torch.Tensor, torch.Tensor]:
    """Low-latency: (selections sent per rank, selections whose expert is on the sender)."""
    T, L = routing.num_tokens, routing.local_experts
    sent, local = [], []
    for r in range(routing.num_ranks):
        idx = routing.topk_idx[r * T:(r + 1) * T]
        sent.append((idx >= 0).sum())
        local.append(((idx >= r * L) & (idx < (r + 1) * L)).sum())
    return torch.stack(sent), torch.stack(local)


def moe_bytes(routing: Routing, op: str, backend: str, dtype: str, hidden: int) -> MoeBytes:
    if op == "round_trip":   # dispatch then combine: the bytes of both, rows of the dispatch
        d = moe_bytes(routing, "dispatch", backend, dtype, hidden)
        c = moe_bytes(routing, "combine", backend, dtype, hidden)
        return MoeBytes(d.deepep_bytes + c.deepep_bytes, d.link_bytes + c.link_bytes, d.rows)
    R, T, K = routing.num_ranks, routing.num_tokens, routing.topk_idx.shape[1]
    row = token_bytes(dtype, hidden) if op == "dispatch" else 2 * hidden
    if backend in LOW_LATENCY_BACKENDS:
        sent, local = _selections(routing)
        msg = row + (LL_FP8_META_BYTES if (op == "dispatch" and dtype == "float8_e4m3") else 0)
        wire = row + (LL_META_BYTES if op == "dispatch" else 0)
        return MoeBytes(float(sent.double().mean() * msg),
                        float((sent - local).double().mean() * wire), float(sent.double().mean()))
    recv = routing.tokens_per_rank().double()
    remote = recv - _self_rows(routing).double()
    deepep = float(recv.mean() * row)
    if backend == "nccl_agrs":
        # all-gather moves every other rank's tokens; reduce-scatter moves
        # (R-1)/R of the R*T*H BF16 partial sums out of each rank.
        link = (R - 1) * T * (row if op == "dispatch" else 2 * hidden)
        return MoeBytes(deepep, float(link), float(R * T))
    meta = NORMAL_META_BYTES + K * 8 if (op == "dispatch" and backend == "ipc") else 0
    return MoeBytes(deepep, float(remote.mean() * (row + meta)), float(recv.mean()))
