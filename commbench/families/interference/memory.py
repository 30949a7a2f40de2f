"""The device memory of one rank of an interference Case on a GPU (Interference.memory_bytes).

Per rank (every rank runs the whole GEMM; only the collective's buffers shard):

- the collective's buffers and its check's chunk-sized temporaries, as the collectives family's
  ``nccl`` backend plans them (measure/collective_memory.collective_plan): out of place, no rotation pool
  (setup calls buffers.allocate without a span), no ``check: bitwise`` reference (this family
  offers no bitwise hooks);
- the GEMM's A[m, k], B[k, n] and C[m, n] in the Case's dtype, and torch's cuBLAS workspace of the
  GEMM's stream (32 MiB on Hopper and Blackwell, CUBLAS_WORKSPACE_CONFIG ":4096:8");
- while gemm.make builds A and B: the broadcast int64 index and its remainder (16 bytes per
  element, gemm._a / gemm._b), A's before B, C and the workspace exist, B's beside A. The transient
  is what the larger of the two holds above A + B + C + workspace, so the plan's peak is the true
  one, not A + B + C plus a whole index;
- the GEMM check's CHECK_ROWS rows of C and their float64 copy (its reference is on the CPU).

Not counted: NCCL's own buffers (the runner keeps 1 GiB of headroom for them).
"""
from __future__ import annotations

import dataclasses

from ... import dtypes
from ...measure.memory import MemoryPlan
from ...measure.collective_memory import collective_plan
from .gemm import CHECK_ROWS

INDEX_BYTES = 16                 # int64 (i + 2k) (or 3k + j) and its remainder mod 3 (or 5), alive together
CUBLAS_WORKSPACE_BYTES = 32 << 20   # torch's default cuBLAS workspace on sm90+ (":4096:8"), per stream
F64 = 8
BUILD = "building A and B (int64 index), above the GEMM's parts"


def gemm_shape(case) -> tuple[int, int, int]:
    return tuple(int(case.param(p)) for p in ("gemm_m", "gemm_n", "gemm_k"))


def interference_plan(case, world_size: int) -> MemoryPlan | None:
    comm = collective_plan(dataclasses.replace(case, bitwise_repeats=0), world_size, 0)
    if comm is None:
        return None
    m, n, k = gemm_shape(case)
    elem = dtypes.size_bytes(case.dtype)
    a, b, c = m * k * elem, k * n * elem, m * n * elem
    gemm_parts = a + b + c + CUBLAS_WORKSPACE_BYTES   # the workspace comes with the first product
    build = max(INDEX_BYTES * m * k,        # A's index temporaries (B and C not made yet)
                a + INDEX_BYTES * k * n)    # B's beside A (C not made yet)
    parts = {**dict(comm.parts), "GEMM A": a, "GEMM B": b, "GEMM C": c,
             "cuBLAS workspace": CUBLAS_WORKSPACE_BYTES}
    transient = {**dict(comm.transient),
                 BUILD: build - gemm_parts,
                 "GEMM check rows": min(CHECK_ROWS, m) * n * (elem + F64)}
    return MemoryPlan.of(parts, transient, note=comm.note)
