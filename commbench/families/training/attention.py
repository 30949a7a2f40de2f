"""Attention pieces the schedules share.

- `causal_attention`: torch SDPA (causal, grouped-query heads repeated) with autograd,
  for layers whose sequence is whole on the rank.
- Block attention for context parallelism: `block_forward` returns the
  output and the log-sum-exp of one (query rows, key block) pair through
  SDPA's flash kernels (CPU and CUDA bf16/fp16; an explicit softmax for fp32
  on CUDA, where the flash kernel does not run); partial results merge with
  `merge`; `block_backward` takes the merged output and log-sum-exp, which
  makes each block's gradients exact without a second pass.
- `plan_calls`: which (query chunks, key chunks, causal?) blocks a rank
  computes when the sequence is cut into chunks with global ids.

Layout: [batch, heads, rows, head_dim]; log-sum-exp [batch, heads, rows] in fp32.
"""
from __future__ import annotations

from dataclasses import dataclass


def causal_attention(q, k, v):
    """Causal SDPA. Key/value heads are repeated up to the query heads first: SDPA's fused
    kernels do not all take grouped heads, and its fallback would build the whole score matrix."""
    import torch.nn.functional as F

    heads = q.shape[1]
    return F.scaled_dot_product_attention(q, expand_kv(k, heads), expand_kv(v, heads), is_causal=True)


def expand_kv(t, heads: int):
    """Repeat key/value heads for grouped-query attention ([B, Hkv, L, D] -> [B, H, L, D])."""
    group = heads // t.shape[1]
    return t if group == 1 else t.repeat_interleave(group, dim=1)


def fold_kv_grad(g, kv_heads: int):
    """Sum the gradient of repeated heads back onto their key/value head."""
    b, h, n, d = g.shape
    group = h // kv_heads
    return g if group == 1 else g.view(b, kv_heads, group, n, d).sum(dim=2)


def _kernel(q) -> str:
    import torch

    if q.device.type == "cpu":
        return "cpu_flash"
    if q.dtype in (torch.bfloat16, torch.float16):
        return "cuda_flash"
    return "math"


def block_forward(q, k, v, causal: bool):
    """(out, lse, meta) of one block; q [B,H,n,D], k/v [B,H,m,D] (heads already expanded).

    `causal` masks key j > query i within the block (used only with n == m)."""
    import torch

    kind = _kernel(q)
    if kind == "cpu_flash":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
        return out, lse.float(), None
    if kind == "cuda_flash":
        r = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)
        # cumulative lengths, max lengths and RNG state: the backward kernel takes them back
        return r[0], r[1][..., :q.shape[2]].float(), tuple(r[2:8])
    return _math_forward(q, k, v, causal) + (None,)


def block_backward(dout, q, k, v, out, lse, causal: bool, meta):
    """(dq, dk, dv) of one block given the merged output and log-sum-exp of its query rows."""
    import torch

    kind = _kernel(q)
    if kind == "cpu_flash":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, k, v, out, lse, 0.0, causal)
    if kind == "cuda_flash":
        cum_q, cum_k, max_q, max_k, seed, offset = meta
        return torch.ops.aten._scaled_dot_product_flash_attention_backward(
            dout, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, 0.0, causal, seed, offset)
    return _math_backward(dout, q, k, v, out, lse, causal)


def _scores(q, k, causal):
    import torch

    s = (q.float() @ k.float().transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return s


def _math_forward(q, k, v, causal):
    s = _scores(q, k, causal)
    lse = s.logsumexp(dim=-1)
    out = (s - lse.unsqueeze(-1)).exp() @ v.float()
    return out.to(q.dtype), lse


def _math_backward(dout, q, k, v, out, lse, causal):
    p = (_scores(q, k, causal) - lse.unsqueeze(-1)).exp()
    do, scale = dout.float(), q.shape[-1] ** -0.5
    dv = p.transpose(-1, -2) @ do
    dp = do @ v.float().transpose(-1, -2)
    ds = p * (dp - (do * out.float()).sum(dim=-1, keepdim=True))
    dq = ds @ k.float() * scale
    dk = ds.transpose(-1, -2) @ q.float() * scale
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def merge(acc_out, acc_lse, out, lse) -> None:
    """Fold one block's (out, lse) into the fp32 accumulators of the same rows, in place."""
    import torch

    new = torch.logaddexp(acc_lse, lse)
    acc_out.mul_((acc_lse - new).exp().unsqueeze(-1)).add_(out.float() * (lse - new).exp().unsqueeze(-1))
    acc_lse.copy_(new)


@dataclass(frozen=True)
class Call:
    """Query chunk positions [q0, q1) against key chunk positions [k0, k1) of the local lists."""

    q0: int
    q1: int
    k0: int
    k1: int
    causal: bool


def plan_calls(q_ids: list[int], kv_ids: list[int]) -> list[Call]:
    """Blocks for query chunks `q_ids` against key chunks `kv_ids` (both ascending global ids).

    A key chunk before a query chunk is fully visible, the same chunk is causal,
    a later one is masked. Equal lists are one causal call over the concatenation
    (the order of disjoint sorted chunks is the order of their positions). Otherwise
    each run of query chunks that sees the same prefix of key chunks is one call,
    and a query chunk present among the keys adds its causal diagonal call."""
    if q_ids == kv_ids:
        return [Call(0, len(q_ids), 0, len(kv_ids), True)]
    calls: list[Call] = []
    visible = [sum(1 for kc in kv_ids if kc < qc) for qc in q_ids]
    start = 0
    for pos in range(1, len(q_ids) + 1):
        if pos == len(q_ids) or visible[pos] != visible[start]:
            if visible[start]:
                calls.append(Call(start, pos, 0, visible[start], False))
            start = pos
    for pos, qc in enumerate(q_ids):
        if qc in kv_ids:
            kpos = kv_ids.index(qc)
            calls.append(Call(pos, pos + 1, kpos, kpos + 1, True))
    return calls


def attend_chunks(q, k, v, q_ids, kv_ids, chunk: int, acc_out, acc_lse, metas: dict) -> None:
    """Forward of `q` (chunks q_ids) against one key block (chunks kv_ids), merged into acc."""
    heads = q.shape[1]
    for c in plan_calls(q_ids, kv_ids):
        rows = slice(c.q0 * chunk, c.q1 * chunk)
        keys = slice(c.k0 * chunk, c.k1 * chunk)
        out, lse, meta = block_forward(q[:, :, rows], expand_kv(k[:, :, keys], heads),
                                       expand_kv(v[:, :, keys], heads), c.causal)
        metas[(c.q1 - c.q0, c.k1 - c.k0, c.causal)] = meta
        merge(acc_out[:, :, rows], acc_lse[:, :, rows], out, lse)


def attend_chunks_backward(dout, q, k, v, out, lse, q_ids, kv_ids, chunk: int, dq_acc, metas: dict):
    """Backward of `attend_chunks` for one key block: adds into dq_acc, returns (dk, dv) fp32."""
    import torch

    heads, kv_heads = q.shape[1], k.shape[1]
    dk = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
    dv = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
    for c in plan_calls(q_ids, kv_ids):
        rows = slice(c.q0 * chunk, c.q1 * chunk)
        keys = slice(c.k0 * chunk, c.k1 * chunk)
        meta = metas.get((c.q1 - c.q0, c.k1 - c.k0, c.causal))
        gq, gk, gv = block_backward(dout[:, :, rows], q[:, :, rows], expand_kv(k[:, :, keys], heads),
                                    expand_kv(v[:, :, keys], heads), out[:, :, rows],
                                    lse[:, :, rows].contiguous(), c.causal, meta)
        dq_acc[:, :, rows] += gq.float()
        dk[:, :, keys] += fold_kv_grad(gk.float(), kv_heads)
        dv[:, :, keys] += fold_kv_grad(gv.float(), kv_heads)
    return dk, dv
