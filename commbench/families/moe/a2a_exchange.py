"""The all-to-all exchange both NCCL-style MoE paths share (the op benchmark in baselines.py and the
layer in layer_nccl.py): token rows out to their experts' ranks, expert outputs back and summed.

``state`` holds the buffers both set up the same way: ``kind`` (symm_a2av uses ``symm``, else
torch.distributed ``dist`` on ``group``), ``rows``, ``send_idx``, ``sendbuf``, ``recv``, ``y``,
``back``, ``acc``, ``out`` and the split sizes."""
from __future__ import annotations

import torch


def dispatch(state) -> None:
    """Each token's row to the ranks of its experts (into ``state.recv``)."""
    torch.index_select(state.rows, 0, state.send_idx, out=state.sendbuf)
    if state.kind == "symm_a2av":
        state.symm.dispatch()
    else:
        state.dist.all_to_all_single(state.recv, state.sendbuf, state.out_splits, state.in_splits,
                                     group=state.group)


def combine(state, weights: torch.Tensor | None = None) -> None:
    """The experts' outputs back to each token's rank, summed in FP32 into ``state.out`` (each one
    scaled by its routing weight when ``weights`` is given)."""
    if state.kind == "symm_a2av":
        state.symm.combine()
    else:
        state.dist.all_to_all_single(state.back, state.y, state.in_splits, state.out_splits,
                                     group=state.group)
    back = state.back.float()
    state.acc.zero_()
    state.acc.index_add_(0, state.send_idx, back if weights is None else back * weights.unsqueeze(1))
    state.out.copy_(state.acc)
