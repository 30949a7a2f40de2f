"""The layer's all2all over torch collectives: nccl_a2a (all_to_all_single), nccl_agrs
(all-gather + reduce-scatter, vLLM's default) and symm_a2av (symmetric-memory all_to_all_vdev).

Each token travels as one packed row: its BF16 values (or E4M3 values and fp32
scales), its top-k expert ids (int32) and weights (fp32), padded to 16 bytes,
so the receiving rank learns the routing with the data in a single
collective, as a real layer must. Rows move as BF16 elements (NCCL and
all_to_all_vdev move them as they are; a byte tensor takes a slower path in
all_to_all_vdev). Split sizes come from the routing on the host, as in the
dispatch/combine baselines: a real layer would first exchange counts.
"""
from __future__ import annotations

import torch

from . import a2a_exchange, reference as ref
from .expert_pack import RowsIn, RowsOut
from .problem import Problem

ROW_ALIGN_BYTES = 16


def packed_layout(p: Problem) -> dict[str, int]:
    """Byte offsets inside a packed row and its width."""
    scales = p.row_bytes
    ids = scales + 4 * p.num_scales
    w = ids + 4 * p.topk
    width = -(-(w + 4 * p.topk) // ROW_ALIGN_BYTES) * ROW_ALIGN_BYTES
    return {"x": 0, "scales": scales, "ids": ids, "w": w, "width": width}


def packed_rows(p: Problem, x: torch.Tensor) -> torch.Tensor:
    """uint8 [tokens, width]: this rank's tokens with their routing, ready to send."""
    lay = packed_layout(p)
    idx, w = p.routing.of_rank(p.rank)
    rows = torch.zeros(p.tokens, lay["width"], dtype=torch.uint8, device=x.device)
    if p.fp8:
        q, scales = ref.quantize_fp8(x)
        rows[:, :p.row_bytes] = q.view(torch.uint8)
        rows[:, lay["scales"]:lay["ids"]] = scales.contiguous().view(torch.uint8)
    else:
        rows[:, :p.row_bytes] = x.contiguous().view(torch.uint8)
    rows[:, lay["ids"]:lay["w"]] = idx.int().to(x.device).view(torch.uint8)
    rows[:, lay["w"]:lay["w"] + 4 * p.topk] = w.float().to(x.device).view(torch.uint8)
    return rows


class NcclComm:
    """Dispatch/combine of one micro-batch through torch.distributed; ``out`` BF16 [tokens, H]."""

    def __init__(self, p: Problem, x: torch.Tensor, kind: str, group, device):
        import torch.distributed as dist

        self.dist, self.group, self.p, self.kind = dist, group, p, kind
        dev = torch.device(device)
        self.device = dev
        lay = packed_layout(p)
        self.rows = packed_rows(p, x).view(torch.bfloat16)
        width = self.rows.shape[1]
        R, T, H = p.ranks, p.tokens, p.hidden
        send_lay = ref.send_layout(p.routing, p.rank)
        send = [(send_lay.send_pos[:, d] >= 0).nonzero().squeeze(1) for d in range(R)]
        self.send_idx = torch.cat(send).to(dev)
        self.in_splits = [len(s) for s in send]
        self.out_splits = ref.normal_recv(p.routing, p.rank).count_per_src.tolist()
        n_send, n_recv = len(self.send_idx), sum(self.out_splits)
        self.out = torch.empty(T, H, dtype=torch.bfloat16, device=dev)
        if kind == "nccl_agrs":
            # every rank's tokens arrive; rows none of whose experts is local get 0
            n = R * T
            self.recv = torch.empty(n, width, dtype=torch.bfloat16, device=dev)
            self.y = torch.empty(n, H, dtype=torch.bfloat16, device=dev)
        else:
            n = n_recv
            self.sendbuf = torch.empty(n_send, width, dtype=torch.bfloat16, device=dev)
            self.recv = torch.empty(n_recv, width, dtype=torch.bfloat16, device=dev)
            self.back = torch.empty(n_send, H, dtype=torch.bfloat16, device=dev)
            self.y = torch.empty(n_recv, H, dtype=torch.bfloat16, device=dev)
            self.acc = torch.empty(T, H, dtype=torch.float32, device=dev)
            if kind == "symm_a2av":
                from .symm import SymmA2A

                # SymmA2A reads p, device, group, rows, splits and send_idx from here and
                # points sendbuf, recv and back into symmetric memory
                self.symm = SymmA2A(self, width)
        base, stride = self.recv.data_ptr(), lay["width"] // 4
        self.layout, self.max_rows = "rows", n
        self.source = RowsIn(base, lay["width"], base + lay["scales"], stride, base + lay["ids"],
                             stride, False, p.rank * p.local_experts, base + lay["w"], stride, n)
        self.sink = RowsOut(self.y.data_ptr(), H)

    def dispatch(self) -> None:
        if self.kind == "nccl_agrs":
            self.dist.all_gather_into_tensor(self.recv, self.rows, group=self.group)
            return
        a2a_exchange.dispatch(self)

    def combine(self) -> None:
        if self.kind == "nccl_agrs":
            # BF16 partial sums, as vLLM's reduce-scatter does
            self.dist.reduce_scatter_tensor(self.out, self.y, group=self.group)
            return
        a2a_exchange.combine(self)

    def failed(self) -> str:
        return ""

    def close(self) -> None:
        torch.cuda.current_stream(self.device).synchronize()
        # SymmA2A holds this object (its st) and this object holds it: a cycle that kept both
        # Cases' buffers until gc ran; cut it so they go by reference count
        self.symm = None
