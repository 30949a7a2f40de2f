"""Context parallelism: attention over a sequence split between ranks (cp_layout.py).

- `p2p` (ring): K/V blocks travel rank to rank with send/recv while the block
  already here is attended; backward sends the K/V around again and their
  gradients one hop behind, the last hop returning them to their owner.
- `all_gather`: K/V of the whole sequence gathered, then attention; backward
  reduce-scatters the K/V gradients back to their owners.
- `a2a` (Ulysses): all-to-all from sequence-split to head-split, attention
  over the whole sequence for 1/c of the heads, all-to-all back.
- `a2a+p2p`: all-to-all inside groups of `cp_a2a_size` ranks, then the ring
  between groups.

Blocks are merged with their log-sum-exp (attention.py). The rest of the
layer (GEMMs, MLP) is token-local. Weight gradients stay on the rank (their
reduction over data and context ranks belongs to fsdp/distopt).
"""
from __future__ import annotations

from .attention import attend_chunks, attend_chunks_backward
from .cp_layout import CpLayout
from .layer import Weights, full_layer_flat, layer_forward, split_flat
from .numerics import Tally
from .reference import full_params, run_model
from .layer_loop import layers_step
from .schedule import Schedule

KV_TAG, DKV_TAG = 1, 2


def _ring_forward(cp: CpLayout, q, k, v, metas):
    import torch

    b, h, rows, d = q.shape
    acc = torch.zeros((b, h, rows, d), dtype=torch.float32, device=q.device)
    lse = torch.full((b, h, rows), float("-inf"), dtype=torch.float32, device=q.device)
    mine = cp.ring_chunks(cp.ring_index)
    kv = torch.stack([k, v])
    for step in range(cp.p):
        src = (cp.ring_index - step) % cp.p
        if step < cp.p - 1:
            incoming = torch.empty_like(kv)
            handle = cp.comm.exchange(kv, cp.next, incoming, cp.prev, p2p_tag=KV_TAG)
        attend_chunks(q, kv[0], kv[1], mine, cp.ring_chunks(src), cp.chunk, acc, lse, metas)
        if step < cp.p - 1:
            handle.wait()
            if not cp.take_stale():
                kv = incoming
    return acc.to(q.dtype), lse


def _ring_backward(cp: CpLayout, dout, q, k, v, out, lse, metas):
    import torch

    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    mine = cp.ring_chunks(cp.ring_index)
    kv = torch.stack([k, v])
    arriving = None
    for step in range(cp.p):
        src = (cp.ring_index - step) % cp.p
        if step < cp.p - 1:
            incoming = torch.empty_like(kv)
            kv_handle = cp.comm.exchange(kv, cp.next, incoming, cp.prev, p2p_tag=KV_TAG)
        dk, dv = attend_chunks_backward(dout, q, kv[0], kv[1], out, lse, mine, cp.ring_chunks(src),
                                        cp.chunk, dq, metas)
        dkv = torch.stack([dk, dv])
        if arriving is not None:       # what the ranks before this one added for this block
            handle, buf = arriving
            handle.wait()
            dkv += buf.float()
        send = dkv.to(k.dtype)
        buf = torch.empty_like(send)
        arriving = (cp.comm.exchange(send, cp.next, buf, cp.prev, p2p_tag=DKV_TAG), buf)
        if step < cp.p - 1:
            kv_handle.wait()
            kv = incoming
    handle, buf = arriving
    handle.wait()                      # this rank's own block, summed over the whole ring
    return dq.to(q.dtype), buf[0], buf[1]


def _gather_forward(cp: CpLayout, q, k, v, metas):
    import torch

    kv = torch.stack([k, v])
    gathered = torch.empty((cp.c * 2, *kv.shape[1:]), dtype=kv.dtype, device=kv.device)
    cp.comm.all_gather(gathered, kv, cp.gather_group).wait()
    if cp.take_stale():
        gathered = kv.repeat(cp.c, 1, 1, 1, 1)
    keys, values = cp.gathered_to_sorted(gathered)
    b, h, rows, d = q.shape
    acc = torch.zeros((b, h, rows, d), dtype=torch.float32, device=q.device)
    lse = torch.full((b, h, rows), float("-inf"), dtype=torch.float32, device=q.device)
    attend_chunks(q, keys, values, cp.owned(cp.rank), list(range(2 * cp.c)), cp.chunk, acc, lse, metas)
    return acc.to(q.dtype), lse, keys, values


def _gather_backward(cp: CpLayout, dout, q, keys, values, out, lse, metas):
    import torch

    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk, dv = attend_chunks_backward(dout, q, keys, values, out, lse, cp.owned(cp.rank),
                                    list(range(2 * cp.c)), cp.chunk, dq, metas)
    grads = cp.sorted_to_gathered(dk, dv, keys.dtype)
    mine = torch.empty((2, *grads.shape[1:]), dtype=grads.dtype, device=grads.device)
    cp.comm.reduce_scatter(mine, grads, cp.gather_group).wait()
    return dq.to(q.dtype), mine[0], mine[1]


def _function():
    import torch

    class CpAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, cp: CpLayout):
            metas: dict = {}
            ctx.cp, ctx.metas = cp, metas
            if cp.mode == "all_gather":
                out, lse, keys, values = _gather_forward(cp, q, k, v, metas)
                ctx.save_for_backward(q, keys, values, out, lse)
                return out
            if cp.a > 1:
                q, k, v = cp.seq_to_heads([q, k, v])
            out, lse = _ring_forward(cp, q, k, v, metas)
            ctx.save_for_backward(q, k, v, out, lse)
            return cp.heads_to_seq([out])[0] if cp.a > 1 else out

        @staticmethod
        def backward(ctx, dout):
            cp, metas = ctx.cp, ctx.metas
            q, k, v, out, lse = ctx.saved_tensors
            dout = dout.contiguous()
            if cp.mode == "all_gather":
                return (*_gather_backward(cp, dout, q, k, v, out, lse, metas), None)
            if cp.a > 1:
                (dout,) = cp.seq_to_heads([dout])
            dq, dk, dv = _ring_backward(cp, dout, q, k, v, out, lse, metas)
            if cp.a > 1:
                dq, dk, dv = cp.heads_to_seq([dq, dk, dv])
            return dq, dk, dv, None

    return CpAttention


class CpSchedule(Schedule):
    def __init__(self, s, ctx, comm, device):
        super().__init__(s, ctx, comm, device)
        self.cp = CpLayout(s, ctx, comm)
        self.fn = _function()
        self.weights = [[t.detach().clone().requires_grad_(True)
                         for t in split_flat(full_layer_flat(s, layer, device, self.dtype), s)]
                        for layer in range(s.layers)]
        self.x = self._local(self._whole("x"))
        self.dy = self._local(self._whole("dy"))

    def _whole(self, what: str):
        return self.data(what, self.s.micro_batch * self.s.seq_len, "cp")

    def _local(self, whole):
        """This rank's rows (its two chunks of every sequence) of a [sequences x seq_len, ...] tensor."""
        import torch

        s, n = self.s, self.cp.chunk
        seqs = whole.view(s.micro_batch, s.seq_len, *whole.shape[1:])
        parts = [seqs[:, cid * n:(cid + 1) * n] for cid in self.cp.owned(self.rank)]
        return torch.cat(parts, dim=1).reshape(-1, *whole.shape[1:])

    def _attend(self, layer: int):
        def attend(q, k, v):
            out = self.fn.apply(q, k, v, self.cp)
            self.look(("attn", layer), out)
            return out
        return attend

    def step(self, timer) -> None:
        self.comm.begin_step()
        self.cp.stale = self.fault
        layers_step(self, timer, self._layer_fn)

    def _layer_fn(self, layer: int, w: Weights):
        attend = self._attend(layer)
        return lambda t: layer_forward(t, w, self.dims, attend)

    def check(self) -> Tally:
        s = self.s
        seen = self.observed_steps()[0]
        tally = Tally(s.dtype)
        ref = run_model(s, full_params(s, self.device, self.dtype), self._whole("x"), self._whole("dy"))
        for layer, attn in enumerate(ref["attn"]):
            # [B, H, seq, D]: this rank's chunks along the sequence
            local = self._local(attn.transpose(1, 2).reshape(-1, attn.shape[1], attn.shape[3]))
            mine = seen[("attn", layer)].transpose(1, 2).reshape(-1, attn.shape[1], attn.shape[3])
            tally.close(f"attention output, layer {layer}", mine, local)
        tally.close("output", seen["out"], self._local(ref["out"]))
        tally.close("input gradient", seen["dx"], self._local(ref["dx"]))
        return tally
