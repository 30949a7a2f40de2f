"""What every op's schedule shares: data, the timer protocol and the check entry point.

A schedule runs one training step with `step(timer)` (timer.mark(phase) after
forward, backward and the optimizer), issuing every collective through its
`Comm`. `check()` resets the schedule, runs an observed step (observed
tensors are cloned into `self.seen`), and compares them with the op's
single-process reference: the returned Tally counts wrong elements.
"""
from __future__ import annotations

from ...dtypes import torch_dtype
from .comm import Comm
from .layer import Dims, det_randn
from .shapes import Shape


class NullTimer:
    def mark(self, name: str) -> None:
        pass


class Schedule:
    def __init__(self, s: Shape, ctx, comm: Comm, device: str):
        self.s, self.ctx, self.comm, self.device = s, ctx, comm, device
        self.rank, self.world = ctx.world.rank, ctx.world.size
        self.dtype = torch_dtype(s.dtype)
        self.rdtype = torch_dtype(s.reduce_dtype)
        self.fault = s.p("fault") == "stale"
        self.seen: dict | None = None
        self.dims = Dims(s.heads, s.kv_heads, s.head_dim, s.micro_batch)

    def data(self, what: str, rows: int, owner, scale: float = 1.0):
        """Input activations or output gradients [rows, hidden], fixed by (what, owner, seed)."""
        return det_randn((rows, self.s.hidden), (what, self.s.p("seed"), owner), self.device, self.dtype,
                         scale)

    def look(self, key, tensor) -> None:
        """Keep a copy of `tensor` for the check (only during an observed step)."""
        if self.seen is not None and tensor is not None:
            self.seen[key] = tensor.detach().clone()

    def step(self, timer) -> None:
        raise NotImplementedError

    def drain(self) -> None:
        """Wait for communication a step left in flight for the next one (none by default)."""

    def reset(self) -> None:
        """Return to the state setup made (parameters, optimizer) before a check."""

    def observed_steps(self, steps: int = 1) -> list[dict]:
        """From the initial state, run `steps` steps; what each step looked at, per step."""
        self.drain()
        self.reset()
        out: list[dict] = []
        try:
            for _ in range(steps):
                self.seen = {}
                self.step(NullTimer())
                out.append(self.seen)
            self.drain()
            return out
        finally:
            self.seen = None
