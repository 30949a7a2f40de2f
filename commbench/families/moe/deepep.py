"""Real DeepEP (deep_ep.Buffer, normal intranode mode) when it is importable.

Same inputs and routing as our kernels; combine sums the returned rows per
token (DeepEP's intranode semantics), so the check is x * ranks reached.
"""
from __future__ import annotations

import torch

from ...measure.state import CaseState
from ...errors import SkipCase
from . import reference as ref
from .problem import Problem

NVL_BUFFER_BYTES = 1 << 30


class DeepEPState(CaseState):
    def __init__(self, p: Problem, op: str, group, device: str):
        super().__init__()  # CaseState defaults; fields set below
        try:
            import deep_ep
        except ImportError as exc:
            raise SkipCase(f"deep_ep is not importable: {exc}") from exc
        if p.fp8:
            raise SkipCase("the DeepEP baseline here runs BF16 only")
        self.p, self.op = p, op
        self.device = torch.device(device)
        self.stream = torch.cuda.current_stream(self.device)
        self.extra: dict = {}
        self.buffer = deep_ep.Buffer(group, NVL_BUFFER_BYTES, 0)
        idx, w = p.routing.of_rank(p.rank)
        self.x = ref.make_tokens(p.rank, p.tokens, p.hidden, self.device)
        self.topk_idx = idx.to(self.device)
        self.topk_w = w.to(self.device)
        layout = self.buffer.get_dispatch_layout(self.topk_idx, p.experts)
        self.per_rank, _, self.per_expert, self.in_rank, _ = layout
        self.dispatch()

    def dispatch(self) -> None:
        out = self.buffer.dispatch(self.x, topk_idx=self.topk_idx, topk_weights=self.topk_w,
                                   num_tokens_per_rank=self.per_rank,
                                   is_token_in_rank=self.in_rank,
                                   num_tokens_per_expert=self.per_expert)
        self.recv_x, self.handle = out[0], out[4]

    def combine(self) -> None:
        self.out, _, _ = self.buffer.combine(self.recv_x, self.handle)

    def run(self) -> None:
        if self.op != "combine":
            self.dispatch()
        if self.op != "dispatch":
            self.combine()

    def check(self) -> int:
        self.dispatch()
        self.combine()
        expected = self.x.float() * self.in_rank.sum(1, keepdim=True).float()
        diff = ref.calc_diff(self.out.float(), expected)
        self.extra["calc_diff"] = diff
        return self.p.tokens * self.p.hidden if diff >= self.p.diff_max else 0

    def close(self) -> None:
        torch.cuda.synchronize(self.device)
