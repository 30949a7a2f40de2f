"""FSDP2 / ZeRO-3 step: parameters sharded flat per layer, gathered when a layer runs.

Forward: all-gather layer l's shards into its unsharded flat buffer (the
next layer's all-gather is issued before this layer computes when
`prefetch`), compute, and with `reshard_after_forward` free the buffer's
storage (autograd keeps views of it). Backward, last layer first: gather
again into the same storage (prefetching one layer ahead), compute the
layer's gradients, free, and reduce-scatter the flat gradient into this
rank's shard (cast to `reduce_dtype` first). HSDP (`replicate` > 1) follows
each reduce-scatter with an all-reduce of the shard over the replica group,
chained on the communication side so compute does not wait for it.
The optimizer step is local work on shards and is not part of the step.
"""
from __future__ import annotations

from . import groups
from .attention import causal_attention
from .bytes import padded
from .layer import backward, forward, full_layer_flat, layer_forward, split_flat
from .numerics import Tally
from .reference import full_params, run_model
from .schedule import Schedule


class FsdpSchedule(Schedule):
    def __init__(self, s, ctx, comm, device):
        import torch

        super().__init__(s, ctx, comm, device)
        self.shard_group = groups.blocks(ctx, s.shard)
        self.replica_group = groups.strided(ctx, s.shard) if s.replicate > 1 else None
        self.shard_index = self.rank % s.shard
        self.flat_numel = padded(s.layer_params, s.shard)
        self.shard_numel = self.flat_numel // s.shard
        lo = self.shard_index * self.shard_numel
        self.shards = [self._full_flat(layer)[lo:lo + self.shard_numel].clone() for layer in range(s.layers)]
        self.grad_shards = [torch.zeros(self.shard_numel, dtype=self.rdtype, device=device)
                            for _ in range(s.layers)]
        self.unsharded = [torch.empty(self.flat_numel, dtype=self.dtype, device=device, requires_grad=True)
                          for _ in range(s.layers)]
        for flat in self.unsharded:
            flat.untyped_storage().resize_(0)
        self.x = self.data("x", s.tokens, self.rank)
        self.dy = self.data("dy", s.tokens, self.rank)

    def _full_flat(self, layer: int):
        import torch.nn.functional as F

        flat = full_layer_flat(self.s, layer, self.device, self.dtype)
        return F.pad(flat, (0, self.flat_numel - flat.numel()))

    # storage of the unsharded buffers -------------------------------------
    def _gather(self, layer: int):
        flat = self.unsharded[layer]
        nbytes = self.flat_numel * flat.element_size()
        if flat.untyped_storage().nbytes() != nbytes:
            flat.untyped_storage().resize_(nbytes)
        return self.comm.all_gather(flat.detach(), self.shards[layer], self.shard_group)

    def _free(self, layer: int) -> None:
        self.unsharded[layer].untyped_storage().resize_(0)

    def _weights(self, layer: int):
        if self.fault and layer == 1:   # fault "stale": layer 1 computes with layer 0's parameters
            return self._stale
        return self.unsharded[layer]

    # the step ---------------------------------------------------------------
    def step(self, timer) -> None:
        s, prefetch, reshard = self.s, self.s.p("prefetch"), self.s.p("reshard_after_forward")
        layers = s.layers
        self.comm.begin_step()
        pending = {0: self._gather(0)}
        saved, x = [], self.x
        for layer in range(layers):
            if prefetch and layer + 1 < layers:
                pending[layer + 1] = self._gather(layer + 1)
            pending.pop(layer).wait()
            flat = self._weights(layer)
            self.look(("param", layer, "fwd"), flat)
            w = split_flat(flat, s)
            x_in, y = forward(lambda t, w=w: layer_forward(t, w, self.dims, causal_attention), x)
            saved.append((x_in, y))
            if self.fault and layer == 0:
                self._stale = flat.detach().clone()   # taken before the storage goes
            if reshard:
                self._free(layer)
            if not prefetch and layer + 1 < layers:
                pending[layer + 1] = self._gather(layer + 1)
            x = y.detach()
        self.look("out", x)
        timer.mark("fwd")
        reduces, dy = [], self.dy
        if reshard:
            pending[layers - 1] = self._gather(layers - 1)
        for layer in reversed(range(layers)):
            if reshard and layer > 0 and prefetch:
                pending[layer - 1] = self._gather(layer - 1)
            if reshard:
                pending.pop(layer).wait()
                self.look(("param", layer, "bwd"), self.unsharded[layer])
            x_in, y = saved[layer]
            dy, (grad,) = backward(x_in, y, dy, [self.unsharded[layer]])
            saved[layer] = None
            self._free(layer)
            if grad is None:   # only under the stale fault: this layer's own parameters went unused
                grad = self.unsharded[0].new_zeros(self.flat_numel)
            reduces.append(self._reduce(layer, grad))
            if reshard and layer > 0 and not prefetch:
                pending[layer - 1] = self._gather(layer - 1)
        self.look("dx", dy)
        for handle in reduces:
            handle.wait()
        for layer in range(layers):
            self.look(("grad", layer), self.grad_shards[layer])
        timer.mark("bwd")

    def _reduce(self, layer: int, grad):
        grad = grad.to(self.rdtype)
        handle = self.comm.reduce_scatter(self.grad_shards[layer], grad, self.shard_group)
        if self.replica_group is None:
            return handle
        return self.comm.chain(handle, lambda: self.comm.all_reduce(self.grad_shards[layer], self.replica_group))

    # the check ----------------------------------------------------------------
    def check(self) -> Tally:
        import torch

        s = self.s
        seen = self.observed_steps()[0]
        tally = Tally(s.dtype)
        flats = full_params(s, self.device, self.dtype)
        for layer in range(s.layers):
            expected = self._full_flat(layer)
            tally.exact(f"gathered parameters, layer {layer}, forward", seen[("param", layer, "fwd")], expected)
            if ("param", layer, "bwd") in seen:
                tally.exact(f"gathered parameters, layer {layer}, backward", seen[("param", layer, "bwd")],
                            expected)
        grad_sum = [torch.zeros(self.flat_numel, dtype=torch.float32, device=self.device) for _ in flats]
        for r in range(self.world):   # every rank's data through the whole-weight model
            ref = run_model(s, flats, self.data("x", s.tokens, r), self.data("dy", s.tokens, r))
            for layer, g in enumerate(ref["grads"]):
                grad_sum[layer][:g.numel()] += g.float()
            if r == self.rank:
                tally.close("output", seen["out"], ref["out"])
                tally.close("input gradient", seen["dx"], ref["dx"])
        lo = self.shard_index * self.shard_numel
        worst = "bfloat16" if "bfloat16" in (s.dtype, s.reduce_dtype) else s.dtype
        for layer in range(s.layers):
            tally.close(f"reduced gradient shard, layer {layer}", seen[("grad", layer)],
                        grad_sum[layer][lo:lo + self.shard_numel], worst)
        return tally
