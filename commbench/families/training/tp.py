"""Megatron tensor parallelism, with or without sequence parallelism.

Each rank holds a column slice of QKV (its heads) and gate+up, and the
matching row slice of the attention output and down projections. Without
sequence parallelism the layer input is whole on every rank: a column-parallel
GEMM needs no forward communication and all-reduces its input gradient
(overlapped with the weight-gradient GEMM); a row-parallel GEMM all-reduces
its output. With sequence parallelism tokens are split between the GEMM
pairs: column-parallel all-gathers its input (and again in backward for the
weight gradient, overlapped with the input-gradient GEMM, then
reduce-scatters the input gradient behind the weight-gradient GEMM);
row-parallel reduce-scatters its output and all-gathers its output gradient.
"""
from __future__ import annotations

from .attention import causal_attention
from .layer import Dims, Weights, full_layer_flat, layer_forward, split_flat
from .numerics import Tally
from .reference import full_params, run_model
from .layer_loop import layers_step
from .schedule import Schedule


class TpComm:
    """What the parallel GEMMs need: the Comm, the group, and sequence parallelism."""

    def __init__(self, comm, group, size: int, sp: bool):
        self.comm, self.group, self.size, self.sp = comm, group, size, sp
        self.skip_reduce = False   # fault "stale": the next row-parallel output is not reduced

    def gathered(self, x):
        import torch

        out = torch.empty((x.shape[0] * self.size, *x.shape[1:]), dtype=x.dtype, device=x.device)
        return out, self.comm.all_gather(out, x.contiguous(), self.group)

    def scattered(self, x):
        import torch

        out = torch.empty((x.shape[0] // self.size, *x.shape[1:]), dtype=x.dtype, device=x.device)
        return out, self.comm.reduce_scatter(out, x.contiguous(), self.group)


def _functions():
    import torch

    class ColumnParallel(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, tp):
            ctx.tp = tp
            ctx.save_for_backward(x, w)
            if tp.sp:
                x, handle = tp.gathered(x)
                handle.wait()
            return x @ w

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            tp = ctx.tp
            if not tp.sp:
                dx = dy @ w.t()
                handle = tp.comm.all_reduce(dx, tp.group)
                dw = x.t() @ dy
                handle.wait()
                return dx, dw, None
            x_full, gather = tp.gathered(x)          # the input again, for the weight gradient
            dx_full = dy @ w.t()
            gather.wait()
            dx, scatter = tp.scattered(dx_full)
            dw = x_full.t() @ dy
            scatter.wait()
            return dx, dw, None

    class RowParallel(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, tp):
            ctx.tp = tp
            ctx.save_for_backward(x, w)
            y = x @ w
            if tp.skip_reduce:
                tp.skip_reduce = False
                return y[:y.shape[0] // tp.size].clone() if tp.sp else y
            if tp.sp:
                y, handle = tp.scattered(y)
            else:
                handle = tp.comm.all_reduce(y, tp.group)
            handle.wait()
            return y

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            tp = ctx.tp
            if tp.sp:
                dy, handle = tp.gathered(dy)
                handle.wait()
            return dy @ w.t(), x.t() @ dy, None

    return ColumnParallel, RowParallel


def shard_weights(full: Weights, s, rank: int, t: int) -> Weights:
    """This rank's slices: its query/key/value heads and MLP columns; matching rows."""
    import torch

    d, hl, kl, fl = s.head_dim, s.heads // t, s.kv_heads // t, s.ffn // t
    q0, k0, v0 = rank * hl * d, s.heads * d + rank * kl * d, (s.heads + s.kv_heads) * d + rank * kl * d
    qkv = torch.cat([full.qkv[:, q0:q0 + hl * d], full.qkv[:, k0:k0 + kl * d], full.qkv[:, v0:v0 + kl * d]], 1)
    gu = torch.cat([full.gu[:, rank * fl:(rank + 1) * fl], full.gu[:, s.ffn + rank * fl:s.ffn + (rank + 1) * fl]], 1)
    return Weights(qkv, full.o[rank * hl * d:(rank + 1) * hl * d],
                   gu, full.down[rank * fl:(rank + 1) * fl])


class TpSchedule(Schedule):
    def __init__(self, s, ctx, comm, device):
        from . import groups

        super().__init__(s, ctx, comm, device)
        self.sp = bool(s.p("sequence_parallel"))
        self.tp = TpComm(comm, groups.world_group(ctx), self.world, self.sp)
        self.col_fn, self.row_fn = _functions()
        self.dims = Dims(s.heads // self.world, s.kv_heads // self.world, s.head_dim, s.micro_batch)
        self.weights = []
        for layer in range(s.layers):
            full = split_flat(full_layer_flat(s, layer, device, self.dtype), s)
            self.weights.append([t.detach().clone().requires_grad_(True)
                                 for t in shard_weights(full, s, self.rank, self.world)])
        self.x = self._local(self.data("x", s.tokens, "tp"))
        self.dy = self._local(self.data("dy", s.tokens, "tp"))

    def _local(self, full):
        if not self.sp:
            return full
        n = full.shape[0] // self.world
        return full[self.rank * n:(self.rank + 1) * n].contiguous()

    def step(self, timer) -> None:
        self.comm.begin_step()
        self.tp.skip_reduce = self.fault
        col = lambda x, w: self.col_fn.apply(x, w, self.tp)  # noqa: E731
        row = lambda x, w: self.row_fn.apply(x, w, self.tp)  # noqa: E731
        layers_step(self, timer, lambda layer, w: lambda t: layer_forward(t, w, self.dims, causal_attention, col, row),
                    look_grads=True)

    def check(self) -> Tally:
        s = self.s
        seen = self.observed_steps()[0]
        tally = Tally(s.dtype)
        ref = run_model(s, full_params(s, self.device, self.dtype), self.data("x", s.tokens, "tp"),
                        self.data("dy", s.tokens, "tp"))
        tally.close("output", seen["out"], self._local(ref["out"]))
        tally.close("input gradient", seen["dx"], self._local(ref["dx"]))
        for layer, g in enumerate(ref["grads"]):
            expected = shard_weights(split_flat(g, s), s, self.rank, self.world)
            for i, name in enumerate(Weights._fields):
                tally.close(f"{name} weight gradient, layer {layer}", seen[("grad", layer, i)], expected[i])
        return tally
