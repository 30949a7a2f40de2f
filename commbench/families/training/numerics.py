"""How a distributed result is compared with its single-process reference.

Copies (gathered parameters) must be bit-identical. Computed tensors may
differ by rounding: the distributed schedule sums partial results in another
order (reductions over ranks, attention merged block by block). Two tests,
with `scale` = the rms of the expected tensor:

- the tensor: its relative L2 error ||a - b|| / ||b|| must stay under `l2`;
  if it does not, every element with |a - b| > rtol |b| + atol scale is wrong
  (at least one);
- single elements: even in a tensor that passes, an element with
  |a - b| > rtol |b| + big scale is wrong (a corrupted row or block).

A schedule that computes with wrong data (a stale block, a skipped
reduction) moves the whole tensor by tens of percent; correct bf16 schedules
stay near 1e-2 relative L2 and 0.1 scale per element (measured on the CPU
suite). NaN or inf always counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

# dtype the tensors were computed in -> (rtol, atol, l2, big); atol and big are fractions of the rms
TOLERANCE = {"float32": (1e-3, 1e-3, 1e-4, 1e-2),
             "float16": (1e-2, 1e-2, 1e-2, 0.25),
             "bfloat16": (4e-2, 4e-2, 5e-2, 0.5)}


@dataclass
class Tally:
    """Wrong elements and the worst relative L2 error over every tensor compared."""

    dtype: str
    wrong: int = 0
    max_err: float = 0.0
    where: list = field(default_factory=list)   # names of tensors with wrong elements

    def exact(self, name: str, actual, expected) -> None:
        if actual.shape != expected.shape:
            self._add(name, expected.numel(), float("inf"))
            return
        bad = int((actual != expected).sum())
        self._add(name, bad, 0.0 if bad == 0 else float("inf"))

    def close(self, name: str, actual, expected, dtype: str | None = None) -> None:
        rtol, atol, l2_tol, big = TOLERANCE[dtype or self.dtype]
        a, b = actual.detach().float(), expected.detach().float()
        if a.shape != b.shape:
            self._add(name, b.numel(), float("inf"))
            return
        norm = float(b.norm())
        scale = norm / max(1, b.numel()) ** 0.5 or 1.0
        diff = (a - b).abs()
        l2 = float(diff.norm()) / (norm or 1.0)
        if not l2 <= l2_tol:    # also NaN
            bad = max(1, int((~(diff <= rtol * b.abs() + atol * scale)).sum()))
        else:
            bad = int((~(diff <= rtol * b.abs() + big * scale)).sum())
        self._add(name, bad, l2 if math.isfinite(l2) else float("inf"))

    def _add(self, name: str, bad: int, err: float) -> None:
        self.wrong += bad
        self.max_err = max(self.max_err, err)
        if bad:
            self.where.append(name)
