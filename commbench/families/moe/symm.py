"""torch symmetric-memory all_to_all_vdev (NVSHMEM inside torch) as a MoE baseline."""
from __future__ import annotations

import torch

from ...errors import SkipCase


class SymmA2A:
    """Symmetric buffers and splits for one BaselineState (kind symm_a2av)."""

    def __init__(self, st, width: int):
        try:
            import torch.distributed._symmetric_memory as symm_mem
        except ImportError as exc:
            raise SkipCase(f"torch symmetric memory not available: {exc}") from exc
        if not hasattr(torch.ops.symm_mem, "all_to_all_vdev"):
            raise SkipCase("this torch build has no torch.ops.symm_mem.all_to_all_vdev")
        self.st = st
        p, dev = st.p, st.device
        try:
            symm_mem.set_backend("NVSHMEM")
            self.group_name = st.group.group_name
            rows = p.ranks * p.tokens
            self.inp = symm_mem.empty(rows, width, dtype=st.rows.dtype, device=dev)
            self.out = symm_mem.empty(rows, width, dtype=st.rows.dtype, device=dev)
            self.comb_in = symm_mem.empty(rows, p.hidden, dtype=torch.bfloat16, device=dev)
            self.comb_out = symm_mem.empty(rows, p.hidden, dtype=torch.bfloat16, device=dev)
            self.splits = symm_mem.empty(p.ranks, dtype=torch.int64, device=dev)
            self.splits_offsets = symm_mem.empty(2, p.ranks, dtype=torch.int64, device=dev)
            self.back_splits = symm_mem.empty(p.ranks, dtype=torch.int64, device=dev)
            self.back_offsets = symm_mem.empty(2, p.ranks, dtype=torch.int64, device=dev)
            for t in (self.inp, self.out, self.comb_in, self.comb_out, self.splits,
                      self.splits_offsets, self.back_splits, self.back_offsets):
                symm_mem.rendezvous(t, self.group_name)
        except (RuntimeError, ValueError) as exc:
            raise SkipCase(f"torch symmetric memory (NVSHMEM backend) unusable here: {exc}") from exc
        self.splits.copy_(torch.tensor(st.in_splits))
        self.back_splits.copy_(torch.tensor(st.out_splits))
        n_send, n_recv = len(st.send_idx), sum(st.out_splits)
        st.sendbuf = self.inp[:n_send]
        st.recv = self.out[:n_recv]
        st.back = self.comb_out[:n_send]

    def dispatch(self) -> None:
        torch.ops.symm_mem.all_to_all_vdev(self.inp, self.out, self.splits, self.splits_offsets,
                                           self.group_name)

    def combine(self) -> None:
        self.comb_in[:self.st.y.shape[0]].copy_(self.st.y)
        torch.ops.symm_mem.all_to_all_vdev(self.comb_in, self.comb_out, self.back_splits,
                                           self.back_offsets, self.group_name)
