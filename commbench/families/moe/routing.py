"""Routing generators: which experts each token chooses, reproducible from a seed.

Every rank generates the routing of *all* ranks' tokens from the same seed on
the CPU, so any rank can compute what any other rank sends and receives
without communication (the check and the byte accounting rely on this).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

METHODS = ("random", "group", "zipf")


@dataclass(frozen=True)
class Routing:
    """Top-k choices of all tokens of all ranks: rows rank-major ([rank * tokens + t])."""

    topk_idx: torch.Tensor      # int64 [ranks * tokens, topk], global expert id, -1 = none
    topk_weights: torch.Tensor  # float32 [ranks * tokens, topk], 0 where idx == -1
    num_ranks: int
    num_tokens: int             # per rank
    num_experts: int
    method: str
    seed: int

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.num_ranks

    def of_rank(self, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(topk_idx, topk_weights) of one rank's tokens."""
        rows = slice(rank * self.num_tokens, (rank + 1) * self.num_tokens)
        return self.topk_idx[rows], self.topk_weights[rows]

    def token_in_rank(self) -> torch.Tensor:
        """bool [ranks * tokens, ranks]: token is sent to rank (owns >= 1 of its experts)."""
        dest = torch.zeros(self.topk_idx.shape[0], self.num_ranks, dtype=torch.bool)
        valid = self.topk_idx >= 0
        owner = torch.where(valid, self.topk_idx // self.local_experts, 0)
        dest.scatter_(1, owner, valid)
        return dest

    def tokens_per_expert(self) -> torch.Tensor:
        """int64 [experts]: (token, expert) selections per expert over all ranks."""
        idx = self.topk_idx[self.topk_idx >= 0]
        return torch.bincount(idx, minlength=self.num_experts)

    def tokens_per_rank(self) -> torch.Tensor:
        """int64 [ranks]: distinct tokens each rank receives in normal mode."""
        return self.token_in_rank().sum(0)

    def imbalance(self) -> dict[str, float]:
        """Load-imbalance figures: max/mean tokens per rank and per expert."""
        per_rank = self.tokens_per_rank().double()
        per_expert = self.tokens_per_expert().double()
        return {
            "rank_load_max_over_mean": float(per_rank.max() / per_rank.mean().clamp(min=1e-12)),
            "expert_load_max_over_mean": float(per_expert.max() / per_expert.mean().clamp(min=1e-12)),
        }


def _normalise(values: torch.Tensor) -> torch.Tensor:
    return (values / values.sum(-1, keepdim=True)).float()


def random_topk(scores_gen: torch.Generator, n: int, experts: int, topk: int):
    """DeepEP's test routing: scores = |randn| + 1, take the top-k."""
    scores = torch.randn(n, experts, generator=scores_gen).abs() + 1
    values, idx = scores.topk(topk, dim=-1)
    return idx, _normalise(values)


def group_limited(gen: torch.Generator, n: int, experts: int, topk: int, n_group: int,
                  topk_group: int):
    """DeepSeek-V3 style: sigmoid scores, keep the topk_group groups with the best
    top-2 score sums, then take the top-k experts inside those groups."""
    if experts % n_group:
        raise ValueError(f"experts ({experts}) must be a multiple of n_group ({n_group})")
    per_group = experts // n_group
    if topk > topk_group * per_group:
        raise ValueError("topk exceeds the experts in topk_group groups")
    scores = torch.sigmoid(torch.randn(n, experts, generator=gen))
    grouped = scores.view(n, n_group, per_group)
    group_score = grouped.topk(min(2, per_group), dim=-1).values.sum(-1)
    keep = group_score.topk(topk_group, dim=-1).indices
    mask = torch.zeros(n, n_group, dtype=torch.bool).scatter_(1, keep, True)
    masked = grouped.masked_fill(~mask.unsqueeze(-1), float("-inf")).view(n, experts)
    values, idx = masked.topk(topk, dim=-1)
    return idx, _normalise(values)


def zipf_skew(gen: torch.Generator, n: int, experts: int, topk: int, zipf_s: float):
    """Skewed load: expert popularity ~ 1/rank^s over a random order of experts;
    each token draws top-k distinct experts with those probabilities."""
    order = torch.randperm(experts, generator=gen)
    popularity = torch.empty(experts, dtype=torch.float64)
    popularity[order] = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64) ** zipf_s
    idx = torch.multinomial(popularity.expand(n, experts), topk, replacement=False, generator=gen)
    weights = torch.rand(n, topk, generator=gen, dtype=torch.float64) + 0.5
    return idx, _normalise(weights)


def generate(method: str, *, num_ranks: int, num_tokens: int, num_experts: int, topk: int,
             seed: int, n_group: int = 8, topk_group: int = 4, zipf_s: float = 1.2) -> Routing:
    """Routing for all ranks' tokens; the same arguments give the same routing everywhere."""
    if num_experts % num_ranks:
        raise ValueError(f"experts ({num_experts}) must be a multiple of ranks ({num_ranks})")
    if not 0 < topk <= num_experts:
        raise ValueError(f"topk must be in 1..{num_experts}, got {topk}")
    gen = torch.Generator().manual_seed(seed)
    n = num_ranks * num_tokens
    if method == "random":
        idx, w = random_topk(gen, n, num_experts, topk)
    elif method == "group":
        idx, w = group_limited(gen, n, num_experts, topk, n_group, topk_group)
    elif method == "zipf":
        idx, w = zipf_skew(gen, n, num_experts, topk, zipf_s)
    else:
        raise ValueError(f"unknown routing {method!r}; choose one of {', '.join(METHODS)}")
    return Routing(idx.long(), w, num_ranks, num_tokens, num_experts, method, seed)


def for_case(params: dict, num_tokens: int, num_ranks: int) -> Routing:
    """The routing a moe Case's parameters name. Built once per Case: set-up and the byte
    accounting after timing (the runner's traffic call) share it; callers must not modify it."""
    return _cached(params["routing"], num_ranks, num_tokens, params["experts"], params["topk"],
                   params["seed"], params["n_group"], params["topk_group"], params["zipf_s"])


@lru_cache(maxsize=1)   # one Case at a time: the last routing only
def _cached(method: str, num_ranks: int, num_tokens: int, num_experts: int, topk: int, seed: int,
            n_group: int, topk_group: int, zipf_s: float) -> Routing:
    return generate(method, num_ranks=num_ranks, num_tokens=num_tokens, num_experts=num_experts,
                    topk=topk, seed=seed, n_group=n_group, topk_group=topk_group, zipf_s=zipf_s)
