"""Baselines in the same family: torch all_to_all_single over NCCL, all-gather +
reduce-scatter (vLLM's default), torch symmetric-memory all_to_all_vdev.

All use the standard layout (received rows source-major, token order) and
identity experts, so the check is the same as for our kernels. FP8 rows
travel as one packed byte row (E4M3 values, then the fp32 scales). Split
sizes come from the routing on the host: a real layer would first exchange
counts, which these timings leave out (in the baselines' favour).
"""
from __future__ import annotations

import torch

from ...measure.state import CaseState
from . import a2a_exchange, reference as ref
from .problem import Problem

COMBINE_RTOL = 2.0 ** -7
COMBINE_ATOL = 1e-3


def packed_rows(p: Problem, rank: int, device) -> torch.Tensor:
    """What rank ``rank`` sends per token: the BF16 row, or FP8 bytes + scale bytes
    (NCCL has no 16-bit integer type, so BF16 rows travel as BF16)."""
    x = ref.make_tokens(rank, p.tokens, p.hidden, device)
    if not p.fp8:
        return x
    fp8, scales = ref.quantize_fp8(x)
    return torch.cat([fp8.view(torch.uint8), scales.contiguous().view(torch.uint8)], dim=1)


def unpack_rows(p: Problem, rows: torch.Tensor) -> torch.Tensor:
    """Packed received rows -> BF16 expert inputs (dequantised for FP8)."""
    if not p.fp8:
        return rows
    fp8 = rows[:, :p.hidden].contiguous().view(torch.float8_e4m3fn)
    scales = rows[:, p.hidden:].contiguous().view(torch.float32)
    return ref.dequantize_fp8(fp8, scales).to(torch.bfloat16)


def expected_recv_rows(p: Problem, device) -> torch.Tensor:
    exp = ref.normal_recv(p.routing, p.rank)
    out = []
    for s in range(p.ranks):
        toks = exp.src_token[exp.src_rank == s].to(device)
        out.append(packed_rows(p, s, device)[toks])
    return torch.cat(out)


class BaselineState(CaseState):
    """One baseline Case on this rank. ``kind``: nccl_a2a, nccl_agrs or symm_a2av."""

    def __init__(self, p: Problem, op: str, kind: str, group, device: str):
        super().__init__()  # CaseState defaults; fields set below
        import torch.distributed as dist

        self.dist, self.group = dist, group
        self.p, self.op, self.kind = p, op, kind
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device)
        self.extra: dict = {}
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            self._setup()
            if op in ("combine", "round_trip"):
                self.dispatch()
                self.y = unpack_rows(p, self.recv).clone()
            self.stream.synchronize()

    def _setup(self) -> None:
        p, dev = self.p, self.device
        lay = ref.send_layout(p.routing, p.rank)
        exp = ref.normal_recv(p.routing, p.rank)
        self.x = ref.make_tokens(p.rank, p.tokens, p.hidden, dev)
        self.rows = packed_rows(p, p.rank, dev)
        send = [(lay.send_pos[:, d] >= 0).nonzero().squeeze(1) for d in range(p.ranks)]
        self.send_idx = torch.cat(send).to(dev)
        self.send_w = torch.cat([lay.rank_weight[s, d] for d, s in enumerate(send)]).to(dev)
        self.in_splits = [len(s) for s in send]
        self.out_splits = exp.count_per_src.tolist()
        width = self.rows.shape[1]
        self.sendbuf = torch.empty(len(self.send_idx), width, dtype=self.rows.dtype, device=dev)
        self.recv = torch.empty(sum(self.out_splits), width, dtype=self.rows.dtype, device=dev)
        self.back = torch.empty(len(self.send_idx), p.hidden, dtype=torch.bfloat16, device=dev)
        self.out = torch.empty(p.tokens, p.hidden, dtype=torch.bfloat16, device=dev)
        self.acc = torch.empty(p.tokens, p.hidden, dtype=torch.float32, device=dev)
        if self.kind == "nccl_agrs":
            rows_all = torch.cat([torch.arange(p.tokens) + s * p.tokens for s in range(p.ranks)])
            self.mine = rows_all[p.routing.token_in_rank()[:, p.rank]].to(dev)
            self.my_w = lay_weight_for(p).to(dev)
            self.gathered = torch.empty(p.ranks * p.tokens, width, dtype=self.rows.dtype,
                                        device=dev)
            self.partial = torch.zeros(p.ranks * p.tokens, p.hidden, dtype=torch.float32,
                                       device=dev)
        if self.kind == "symm_a2av":
            from .symm import SymmA2A

            self.symm = SymmA2A(self, width)

    def run(self) -> None:
        with torch.cuda.stream(self.stream):
            if self.op != "combine":
                self.dispatch()
            if self.op != "dispatch":
                self.combine()   # round_trip: over the expert outputs made at set-up

    def dispatch(self) -> None:
        if self.kind == "nccl_agrs":
            self.dist.all_gather_into_tensor(self.gathered, self.rows, group=self.group)
            torch.index_select(self.gathered, 0, self.mine, out=self.recv)
            return
        a2a_exchange.dispatch(self)

    def combine(self) -> None:
        if self.kind == "nccl_agrs":
            # FP32 partial sums: BF16 partials summed over many ranks miss the 5e-6 threshold.
            self.partial.index_copy_(0, self.mine, self.y.float() * self.my_w.unsqueeze(1))
            self.dist.reduce_scatter_tensor(self.acc, self.partial, group=self.group)
            self.out.copy_(self.acc)
            return
        a2a_exchange.combine(self, self.send_w)

    def check(self) -> int:
        p = self.p
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            wrong = 0
            if self.op in ("dispatch", "round_trip"):
                self.dispatch()
                expected = expected_recv_rows(p, self.device)
                wrong += int((self.recv != expected).sum())
                self.y = unpack_rows(p, self.recv).clone()
            self.combine()
            expected = ref.expected_combine(self.x, torch.as_tensor(
                p.routing.of_rank(p.rank)[1], device=self.device))
            got = self.out.float()
            if self.op == "combine":
                bad = (got - expected).abs() > COMBINE_RTOL * expected.abs() + COMBINE_ATOL
                wrong += int(bad.sum())
            diff = ref.calc_diff(got, expected)
            self.stream.synchronize()
        self.extra["calc_diff"] = diff
        if diff >= p.diff_max:
            wrong += p.tokens * p.hidden
        return wrong

    def close(self) -> None:
        self.stream.synchronize()


def lay_weight_for(p: Problem) -> torch.Tensor:
    """Per received row (source-major), the summed weight of this rank's experts."""
    exp = ref.normal_recv(p.routing, p.rank)
    return exp.topk_weights.sum(1)
