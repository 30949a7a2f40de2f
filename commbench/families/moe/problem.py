"""One MoE Case in concrete terms: shape, routing and this rank's place in it."""
from __future__ import annotations

from dataclasses import dataclass

from . import routing
from .routing import Routing
from .shape import FP8_BLOCK, tokens_for

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


def make_problem(size_bytes: int, params: dict, rank: int, world_size: int, dtype: str) -> Problem:
    routed = routing.for_case(params, tokens_for(size_bytes, params["hidden"]), world_size)
    return Problem(routed, rank, dtype, params["hidden"], params["num_sms"])
