"""The layer's all2all over our kernels: ipc (normal mode), ipc_ll and nvshmem_ll (low latency).

One PeerState per micro-batch (each its own workspace and epochs). The expert
step reads what the dispatch left in the workspace and writes the expert
outputs where the combine reads them: normal mode, the weighted sum per
received row (the combine then adds rows with weight 1); low latency, the
unweighted output per slot (the combine weighs at the source).
"""
from __future__ import annotations

import torch

from . import reference as ref
from .expert_pack import RowsIn, RowsOut, SlotsIn, SlotsOut
from .peer import PeerState
from .problem import Problem


class PeerComm:
    """Dispatch/combine of one micro-batch; ``out`` holds the combined BF16 [tokens, H]."""

    def __init__(self, p: Problem, x: torch.Tensor, mode: str, comm, device, max_tokens: int = 0,
                 transport: str = "ipc", handle=None, buffer_name: str | None = None):
        self.p, self.mode = p, mode
        self.st = PeerState(p, "dispatch", mode, comm, device, max_tokens, transport, handle,
                            buffer_name)
        try:
            self._use_inputs(x)
        except Exception:
            self.st.close()
            raise
        self.out = self.st.out
        base, off = self.st.ws.peers[p.rank], self.st.offsets
        K, H = p.topk, p.hidden
        if mode == "normal":
            self.layout = "rows"
            self.max_rows = int(p.routing.tokens_per_rank()[p.rank])
            self.st.rank_w.fill_(1.0)   # the experts' rank already weighed each row
            self.source = RowsIn(base + off["recv_x"], p.row_bytes, base + off["recv_scales"],
                                 p.num_scales, base + off["recv_topk_idx"], K, False, 0,
                                 base + off["recv_topk_w"], K, self.max_rows)
            self.sink = RowsOut(base + off["y"], H)
        else:
            self.layout, self.max_rows = "slots", 0
            R, Tm = p.ranks, self.st.max_tokens
            self.num_segs = p.local_experts * R
            self.source = SlotsIn(base + off["ll_recv_x"], p.row_bytes, base + off["ll_recv_scales"],
                                  R * Tm * p.num_scales, p.num_scales, 1,
                                  base + off["ll_recv_count"], self.num_segs, R, Tm)
            self.sink = SlotsOut(base + off["ll_y"], H)

    def _use_inputs(self, x: torch.Tensor) -> None:
        """PeerState made its own tokens 0..n-1; a micro-batch is a slice of the layer's."""
        st = self.st
        with torch.cuda.device(st.device), torch.cuda.stream(st.stream):
            st.x.copy_(x)   # BF16: x_send is this tensor
            if self.p.fp8:
                q, scales = ref.quantize_fp8(st.x)
                st.x_send.copy_(q.view(torch.uint8))
                st.scales.copy_(scales)
            if st.transport == "nvshmem":
                st._stage_inputs()   # puts read the input from symmetric memory
            st.stream.synchronize()

    def dispatch(self) -> None:
        self.st.dispatch()

    def combine(self) -> None:
        self.st.combine()

    def failed(self) -> str:
        """Why the last ops cannot be trusted ('' if they can): a cross-rank wait timed out."""
        if int(self.st.err.item()):
            return "a cross-rank wait in the MoE kernels timed out: a peer did not arrive"
        return ""

    def close(self) -> None:
        self.st.close()
