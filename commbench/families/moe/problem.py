"""One MoE Case in concrete terms: shape, routing and this rank's place in it."""
from __future__ import annotations

from dataclasses import dataclass

from .reference import FP8_BLOCK
from .routing import Routing, generate

DTYPES = ("bfloat16", "float8_e4m3")
BF16_DIFF_MAX = 5e-6   # DeepEP's calc_diff thresholds for combine(dispatch(x))
FP8_DIFF_MAX = 5e-4


@dataclass(frozen=True)
class Problem:
    routing: Routing
    rank: int
    dtype: str
    hidden: int
    num_sms: int

    @property
    def tokens(self) -> int:
        return self.routing.num_tokens

    @property
    def topk(self) -> int:
        return int(self.routing.topk_idx.shape[1])

    @property
    def ranks(self) -> int:
        return self.routing.num_ranks

    @property
    def experts(self) -> int:
        return self.routing.num_experts

    @property
    def local_experts(self) -> int:
        return self.routing.local_experts

    @property
    def fp8(self) -> bool:
        return self.dtype == "float8_e4m3"

    @property
    def row_bytes(self) -> int:
        return self.hidden if self.fp8 else 2 * self.hidden

    @property
    def num_scales(self) -> int:
        return self.hidden // FP8_BLOCK if self.fp8 else 0

    @property
    def diff_max(self) -> float:
        return FP8_DIFF_MAX if self.fp8 else BF16_DIFF_MAX


def tokens_for(size_bytes: int, hidden: int) -> int:
    """size_bytes is the per-rank BF16 input, tokens * hidden * 2 (whatever the dispatch dtype)."""
    return size_bytes // (2 * hidden)


def shape_problem(size_bytes: int, hidden: int, dtype: str) -> str | None:
    """Reason a (size, hidden, dtype) cannot be run, or None."""
    if hidden <= 0 or hidden % 8:
        return f"hidden must be a positive multiple of 8, got {hidden}"
    if size_bytes <= 0 or size_bytes % (2 * hidden):
        return (f"size_bytes ({size_bytes}) must be tokens * hidden * 2 "
                f"(the per-rank BF16 input) with hidden={hidden}")
    if dtype == "float8_e4m3" and hidden % FP8_BLOCK:
        return f"FP8 dispatch needs hidden to be a multiple of {FP8_BLOCK}, got {hidden}"
    return None


def make_problem(size_bytes: int, params: dict, rank: int, world_size: int, dtype: str) -> Problem:
    routing = generate(params["routing"], num_ranks=world_size,
                       num_tokens=tokens_for(size_bytes, params["hidden"]),
                       num_experts=params["experts"], topk=params["topk"], seed=params["seed"],
                       n_group=params["n_group"], topk_group=params["topk_group"],
                       zipf_s=params["zipf_s"])
    return Problem(routing, rank, dtype, params["hidden"], params["num_sms"])
