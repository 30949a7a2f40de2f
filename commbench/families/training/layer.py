"""One transformer layer (pre-norm attention + SwiGLU MLP) and deterministic data.

Weights are [in, out] matrices: QKV (query heads, then key heads, then value
heads), attention output, gate+up (gate columns, then up columns), down.
`layer_forward` takes the two linear kinds as functions so one definition
serves every schedule: `col` maps token-local input to all tokens' columns
(tensor parallel: all-gather in with sequence parallelism), `row` maps back
(tensor parallel: all-reduce or reduce-scatter out); `attend` is the
attention over [batch, heads, seq, head_dim] (SDPA, or context-parallel).
"""
from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from .bytes import layer_weight_sizes
from .shapes import Shape


class Weights(NamedTuple):
    qkv: object
    o: object
    gu: object
    down: object


@dataclass(frozen=True)
class Dims:
    """Per-rank attention layout: local heads, and how tokens form sequences."""

    heads: int
    kv_heads: int
    head_dim: int
    micro_batch: int


def det_randn(shape, key: tuple, device, dtype, scale: float = 1.0):
    """Normal values fixed by `key` (every rank can regenerate any rank's data)."""
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(zlib.crc32(repr(key).encode()))
    out = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return out.mul_(scale).to(dtype)


def weight_shapes(s: Shape) -> list[tuple[int, int]]:
    h, f = s.hidden, s.ffn
    return [(h, s.qkv_cols), (s.heads * s.head_dim, h), (h, 2 * f), (f, h)]


def full_layer_flat(s: Shape, layer: int, device, dtype):
    """One layer's weights, flattened in model order; each scaled 1/sqrt(fan_in)."""
    import torch

    parts = [det_randn((rows * cols,), ("weight", s.p("seed"), layer, i), device, dtype, rows ** -0.5)
             for i, (rows, cols) in enumerate(weight_shapes(s))]
    return torch.cat(parts)


def split_flat(flat, s: Shape) -> Weights:
    """Views of a flat buffer (model order, at least layer_params long) as the four matrices."""
    views, offset = [], 0
    for numel, (rows, cols) in zip(layer_weight_sizes(s), weight_shapes(s)):
        views.append(flat[offset:offset + numel].view(rows, cols))
        offset += numel
    return Weights(*views)


def matmul(x, w):
    return x @ w


def layer_forward(x, w: Weights, dims: Dims, attend: Callable, col: Callable = matmul,
                  row: Callable = matmul):
    """y = h + MLP(norm(h)), h = x + Attn(norm(x)); tokens are rows (micro_batch sequences)."""
    import torch.nn.functional as F

    hq, hk, d = dims.heads, dims.kv_heads, dims.head_dim
    qkv = col(F.rms_norm(x, (x.shape[-1],), eps=1e-6), w.qkv)
    tokens, mb = qkv.shape[0], dims.micro_batch
    seq = tokens // mb
    q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    q = q.view(mb, seq, hq, d).transpose(1, 2)
    k = k.view(mb, seq, hk, d).transpose(1, 2)
    v = v.view(mb, seq, hk, d).transpose(1, 2)
    o = attend(q, k, v).transpose(1, 2).reshape(tokens, hq * d)
    h = x + row(o, w.o)
    gate, up = col(F.rms_norm(h, (h.shape[-1],), eps=1e-6), w.gu).chunk(2, dim=-1)
    return h + row(F.silu(gate) * up, w.down)


def forward(fn: Callable, x):
    """Run one layer on a detached copy of x that collects its gradient: (input leaf, output)."""
    x_in = x.detach().requires_grad_(True)
    return x_in, fn(x_in)


def backward(x_in, y, dy, params: list):
    """Gradients of one layer: (dx, [dparam...]); unused params get None."""
    import torch

    grads = torch.autograd.grad(y, [x_in, *params], dy, allow_unused=True)
    return grads[0], list(grads[1:])
