"""Dense single-process reference of the MoE layer, and the per-token comparison with it.

The reference takes one rank's tokens, their routing and the experts' weights
(rebuilt from the expert ids), runs every chosen expert on its tokens with
plain torch GEMMs and sums the outputs with the routing weights in FP32. No
communication, no grouping, no permutation: a distributed layer that moves
the wrong token, uses the wrong expert or weight, or drops a choice differs
from it.

Tolerance, per token: the relative L2 error ||out - ref|| / ||ref||.
- BF16 dispatch: 1e-2. The layer rounds to BF16 where the reference keeps FP32
  (each expert's weighted sum per received row, the combined output: 2^-9
  relative each) and its GEMMs accumulate in another order (a BF16 ulp, 2^-8,
  on some elements); together a few 1e-3.
- FP8 dispatch: 2e-2 against the same reference run on the tokens the experts
  really see, dequantise(quantise(x)) with the family's per-128-channel E4M3
  scaling. A backend that quantises by itself (DeepEP low latency) may round an
  element to the neighbouring E4M3 value (6% of that element).
A token that lost one of its top-8 experts (weight ~1/8) is off by ~0.1-0.4, a
wrong expert or token by ~1: both far above either tolerance.
"""
from __future__ import annotations

import torch

from . import reference as ref
from .experts import expert_forward, expert_weights

BF16_TOKEN_RTOL = 1e-2
FP8_TOKEN_RTOL = 2e-2


def token_rtol(fp8: bool) -> float:
    return FP8_TOKEN_RTOL if fp8 else BF16_TOKEN_RTOL


def expert_inputs(x: torch.Tensor, fp8: bool) -> torch.Tensor:
    """What the experts see of BF16 tokens x: x itself, or its FP8 round trip."""
    if not fp8:
        return x
    q, scales = ref.quantize_fp8(x)
    return ref.dequantize_fp8(q, scales).to(torch.bfloat16)


def reference_layer(x: torch.Tensor, topk_idx: torch.Tensor, topk_w: torch.Tensor,
                    hidden: int, inter: int, weights=expert_weights) -> torch.Tensor:
    """FP32 [T, H]: sum_k w[t,k] * expert_{idx[t,k]}(x[t]) for one rank's BF16 tokens x.

    ``weights(expert, hidden, inter, device)`` gives (w13, w2); the default
    rebuilds them from the expert id, one expert at a time (so all experts never
    need to fit in memory at once)."""
    out = torch.zeros(x.shape[0], hidden, dtype=torch.float32, device=x.device)
    idx = topk_idx.to(x.device)
    w = topk_w.to(x.device).float()
    for e in torch.unique(idx[idx >= 0]).tolist():
        rows, ks = (idx == e).nonzero(as_tuple=True)
        w13, w2 = weights(e, hidden, inter, x.device)
        y = expert_forward(x[rows], w13, w2)
        out.index_add_(0, rows, y.float() * w[rows, ks].unsqueeze(1))
    return out


def token_errors(out: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Relative L2 error per token (row), FP32; a zero reference row compares absolutely."""
    diff = (out.float() - expected.float()).norm(dim=1)
    scale = expected.float().norm(dim=1)
    return torch.where(scale > 0, diff / scale.clamp(min=1e-30), diff)


def mismatching_tokens(out: torch.Tensor, expected: torch.Tensor, rtol: float) -> int:
    """Tokens whose relative error exceeds rtol (NaN and inf count as mismatches)."""
    err = token_errors(out, expected)
    return int((~(err <= rtol)).sum())
