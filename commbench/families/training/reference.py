"""Single-process reference: the same layers with whole weights, whole sequences and no
communication, on the same device and inputs as the schedule being checked."""
from __future__ import annotations

from .attention import causal_attention
from .layer import Dims, backward, forward, full_layer_flat, layer_forward, split_flat
from .shapes import Shape


def full_params(s: Shape, device, dtype) -> list:
    """Every layer's whole weights as flat leaves that collect gradients."""
    return [full_layer_flat(s, layer, device, dtype).requires_grad_(True) for layer in range(s.layers)]


def run_model(s: Shape, flats: list, x, dy, dims: Dims | None = None) -> dict:
    """Forward and backward through all layers: output, input gradient, per-layer weight
    gradients (flat, model order) and each layer's attention output."""
    dims = dims or Dims(s.heads, s.kv_heads, s.head_dim, s.micro_batch)
    attn: list = []

    def attend(q, k, v):
        out = causal_attention(q, k, v)
        attn.append(out.detach())
        return out

    saved = []
    for flat in flats:
        w = split_flat(flat, s)
        x_in, y = forward(lambda t, w=w: layer_forward(t, w, dims, attend), x)
        saved.append((x_in, y))
        x = y.detach()
    out = x
    grads = [None] * len(flats)
    for layer in reversed(range(len(flats))):
        x_in, y = saved[layer]
        dy, (g,) = backward(x_in, y, dy, [flats[layer]])
        grads[layer] = g
    return {"out": out, "dx": dy, "grads": grads, "attn": attn}
