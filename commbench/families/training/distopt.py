"""Megatron distributed optimizer (ZeRO-1/2) step.

Parameters and gradients live in buckets (bytes.bucket_sizes: weights in the
order backward produces their gradients, at least `bucket_params` per
bucket, padded to a multiple of the ranks). Backward adds each layer's
weight gradients into the bucket's gradient buffer (the main grads, in
`reduce_dtype`); with `overlap_grad_reduce` a bucket is reduce-scattered as
soon as its last gradient is in, else one bucket after backward. The
optimizer (SGD on this rank's fp32 master shard of every bucket) writes the
new shard, and the buckets are all-gathered back into the parameters in the
order forward uses them: left in flight behind the next step's forward with
`overlap_param_gather` (each layer waits for its buckets), else waited
before the step ends.
"""
from __future__ import annotations

from .attention import causal_attention
from .bytes import bucket_sizes, layer_weight_sizes, padded
from .layer import Weights, backward, forward, full_layer_flat, layer_forward, split_flat, weight_shapes
from .numerics import Tally
from .reference import full_params, run_model
from .schedule import Schedule

TIMED_LR = 1e-4   # the timed steps' learning rate (its value does not change the time)


class DistoptSchedule(Schedule):
    def __init__(self, s, ctx, comm, device):
        import torch

        from . import groups

        super().__init__(s, ctx, comm, device)
        self.group = groups.world_group(ctx)
        self.buckets = bucket_sizes(s)
        sizes, shapes = layer_weight_sizes(s), weight_shapes(s)
        self.where: dict[tuple[int, int], tuple[int, int]] = {}   # (layer, weight) -> (bucket, offset)
        numels = []
        for b, items in enumerate(self.buckets):
            offset = 0
            for item in items:
                self.where[item] = (b, offset)
                offset += sizes[item[1]]
            numels.append(padded(offset, self.world))
        self.shard_numel = [n // self.world for n in numels]
        new = lambda n, dt: torch.zeros(n, dtype=dt, device=device)  # noqa: E731
        self.params = [new(n, self.dtype) for n in numels]
        self.grads = [new(n, self.rdtype) for n in numels]
        self.grad_shards = [new(n, self.rdtype) for n in self.shard_numel]
        self.param_shards = [new(n, self.dtype) for n in self.shard_numel]
        self.masters = [new(n, torch.float32) for n in self.shard_numel]
        # fault "stale": the gathered parameters land here instead of in the parameters
        self.scratch = [new(n, self.dtype) for n in numels] if self.fault else None
        self.shapes, self.sizes = shapes, sizes
        self.layer_buckets = [sorted({self.where[(layer, w)][0] for w in range(4)}) for layer in range(s.layers)]
        # a bucket is complete once backward reaches the lowest layer it holds
        self.ready_after = {layer: [b for b, items in enumerate(self.buckets) if min(i[0] for i in items) == layer]
                            for layer in range(s.layers)}
        self.pending: dict[int, object] = {}
        self.lr = TIMED_LR
        self.x = self.data("x", s.tokens, self.rank)
        self.dy = self.data("dy", s.tokens, self.rank)
        self.reset()

    def _view(self, bufs, layer: int, w: int):
        b, offset = self.where[(layer, w)]
        rows, cols = self.shapes[w]
        return bufs[b][offset:offset + self.sizes[w]].view(rows, cols)

    def _shard(self, buf, b: int):
        n = self.shard_numel[b]
        return buf[self.rank * n:(self.rank + 1) * n]

    def reset(self) -> None:
        for layer in range(self.s.layers):
            full = split_flat(full_layer_flat(self.s, layer, self.device, self.dtype), self.s)
            for w in range(4):
                self._view(self.params, layer, w).copy_(full[w])
        for b in range(len(self.buckets)):
            self.masters[b].copy_(self._shard(self.params[b], b))

    def drain(self) -> None:
        for handle in self.pending.values():
            handle.wait()
        self.pending.clear()

    def step(self, timer) -> None:
        s = self.s
        self.comm.begin_step()
        saved, x = [], self.x
        for layer in range(s.layers):
            for b in self.layer_buckets[layer]:
                if b in self.pending:
                    self.pending.pop(b).wait()
            leaves = [self._view(self.params, layer, w).detach().requires_grad_(True) for w in range(4)]
            for w, leaf in enumerate(leaves):
                self.look(("param", layer, w), leaf)
            x_in, y = forward(lambda t, w=Weights(*leaves): layer_forward(t, w, self.dims, causal_attention), x)
            saved.append((x_in, y, leaves))
            x = y.detach()
        self.look("out", x)
        timer.mark("fwd")
        for g in self.grads:
            g.zero_()
        reduces, dy = [], self.dy
        for layer in reversed(range(s.layers)):
            x_in, y, leaves = saved[layer]
            dy, grads = backward(x_in, y, dy, leaves)
            saved[layer] = None
            for w, g in enumerate(grads):
                self._view(self.grads, layer, w).add_(g)
            if s.p("overlap_grad_reduce"):
                reduces += [self._reduce(b) for b in self.ready_after[layer]]
        if not s.p("overlap_grad_reduce"):
            reduces = [self._reduce(b) for b in range(len(self.buckets))]
        self.look("dx", dy)
        for handle in reduces:
            handle.wait()
        for b, g in enumerate(self.grad_shards):
            self.look(("grad", b), g)
        timer.mark("bwd")
        self._optimizer_and_gather()
        timer.mark("optim")

    def _reduce(self, b: int):
        return self.comm.reduce_scatter(self.grad_shards[b], self.grads[b], self.group)

    def _optimizer_and_gather(self) -> None:
        for b in range(len(self.buckets)):
            self.masters[b].add_(self.grad_shards[b].float(), alpha=-self.lr)
            self.param_shards[b].copy_(self.masters[b])
        target = self.scratch or self.params
        for b in reversed(range(len(self.buckets))):   # the bucket of the first layers first
            handle = self.comm.all_gather(target[b], self.param_shards[b], self.group, tag=f"param.{b}")
            if self.s.p("overlap_param_gather"):
                self.pending[b] = handle
            else:
                handle.wait()

    # the check ----------------------------------------------------------------
    def check(self) -> Tally:
        import torch

        s = self.s
        tally = Tally(s.dtype)
        flats = full_params(s, self.device, self.dtype)
        total = [torch.zeros(f.numel(), dtype=torch.float32, device=self.device) for f in flats]
        mine = None
        for r in range(self.world):
            ref = run_model(s, flats, self.data("x", s.tokens, r), self.data("dy", s.tokens, r))
            for layer, g in enumerate(ref["grads"]):
                total[layer] += g.float()
            if r == self.rank:
                mine = ref
        p0 = torch.cat([f.detach().float() for f in flats])
        g_all = torch.cat(total)
        # a step large enough that parameters left un-updated cannot pass the tolerance
        lr = 0.25 * float(p0.pow(2).mean().sqrt() / g_all.pow(2).mean().sqrt().clamp_min(1e-30))
        self.lr = lr
        try:
            first, second = self.observed_steps(steps=2)
        finally:
            self.lr = TIMED_LR
        tally.close("output", first["out"], mine["out"])
        tally.close("input gradient", first["dx"], mine["dx"])
        expected_grads = [torch.zeros(g.numel(), dtype=torch.float32, device=self.device) for g in self.grads]
        for layer in range(s.layers):
            full = split_flat(total[layer], s)
            start = split_flat(flats[layer].detach(), s)
            for w in range(4):
                self._view(expected_grads, layer, w).copy_(full[w])
                updated = (start[w].float() - lr * full[w]).to(self.dtype)
                tally.exact(f"parameters, layer {layer} weight {w}, first step", first[("param", layer, w)],
                            start[w])
                tally.close(f"gathered updated parameters, layer {layer} weight {w}",
                            second[("param", layer, w)], updated)
        worst = "bfloat16" if "bfloat16" in (s.dtype, s.reduce_dtype) else s.dtype
        for b in range(len(self.buckets)):
            tally.close(f"reduced gradient shard, bucket {b}", first[("grad", b)],
                        self._shard(expected_grads[b], b), worst)
        return tally
