"""Plain-torch twin of kernels/moe_expert_pack.cu: the expert-side permutation, on any device.

The CPU tests build a whole layer from these (all ranks at once, see
layer_sim.py); the GPU test compares the CUDA kernels with them. Groups come
out in expert order; inside a group the CUDA kernels may order rows
differently (atomics), which changes nothing a row's expert computes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Grouped:
    """Rows grouped by local expert for a grouped GEMM."""

    xe: torch.Tensor     # BF16 [pairs, H]
    ends: torch.Tensor   # int32 [L]: cumulative group ends
    where: torch.Tensor  # rows layout: int64 [n, K] place of each choice (-1 = not local);
                         # slots layout: int64 [pairs] slot each row came from


def pack_rows(x: torch.Tensor, ids: torch.Tensor, local_base: int, num_local: int) -> Grouped:
    """Received rows x [n, H] with expert ids [n, K] (local = id - local_base)."""
    local = ids.long() - local_base
    valid = (ids >= 0) & (local >= 0) & (local < num_local)
    r, k = valid.nonzero(as_tuple=True)
    order = torch.argsort(local[r, k], stable=True)
    r, k = r[order], k[order]
    where = torch.full(ids.shape, -1, dtype=torch.int64, device=x.device)
    where[r, k] = torch.arange(len(r), device=x.device)
    counts = torch.bincount(local[r, k], minlength=num_local)
    return Grouped(x[r], torch.cumsum(counts, 0).int(), where)


def unpack_rows(ye: torch.Tensor, g: Grouped, weights: torch.Tensor) -> torch.Tensor:
    """FP32 [n, H]: per received row, the weighted sum of its local experts' outputs."""
    n, hidden = g.where.shape[0], ye.shape[1]
    out = torch.zeros(n, hidden, dtype=torch.float32, device=ye.device)
    r, k = (g.where >= 0).nonzero(as_tuple=True)
    out.index_add_(0, r, ye[g.where[r, k]].float() * weights[r, k].float().unsqueeze(1))
    return out


def pack_slots(x: torch.Tensor, counts: torch.Tensor, segs_per_expert: int,
               seg_rows: int) -> Grouped:
    """Slots x [segments * seg_rows, H]; segment j holds counts[j] valid rows from slot
    j * seg_rows; an expert's segments are consecutive."""
    slots = [j * seg_rows + torch.arange(int(c), device=x.device) for j, c in enumerate(counts.tolist())]
    slot = torch.cat(slots) if slots else torch.zeros(0, dtype=torch.int64, device=x.device)
    per_expert = counts.view(-1, segs_per_expert).sum(1)
    return Grouped(x[slot], torch.cumsum(per_expert, 0).int(), slot)


def unpack_slots(ye: torch.Tensor, g: Grouped, y: torch.Tensor) -> None:
    """Each expert output back into its slot of y [slots, H] (unweighted)."""
    y[g.where] = ye.to(y.dtype)
