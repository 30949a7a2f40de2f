"""The device memory of one rank of an interference Case on a GPU (Interference.memory_bytes).

Per rank (every rank runs the whole GEMM; only the collective's buffers shard):

- the collective's buffers and its check's chunk-sized temporaries, as the collectives family's
  ``nccl`` backend plans them (measure/collective_memory.collective_plan): out of place, no rotation pool
  (setup calls buffers.allocate without a span), no ``check: bitwise`` reference (this family
  offers no bitwise hooks);
- the GEMM's A[m, k], B[k, n] and C[m, n] in the Case's dtype, and torch's cuBLAS workspace of the
  GEMM's stream (32 MiB on Hopper and Blackwell, CUBLAS_WORKSPACE_CONFIG ":4096:8");
- gemm.make gathers A and B from their small tiles (a 1-D index per side, no matrix-sized
  temporaries), so building them holds nothing beyond the matrices;
- the GEMM check's CHECK_ROWS rows of C and their float64 copy (its reference is on the CPU).

Not counted: NCCL's own buffers (the runner keeps 1 GiB of headroom for them).
"""
from __future__ import annotations

import dataclasses

from ... import dtypes
from ...measure.memory import MemoryPlan
from ...measure.collective_memory import collective_plan
from .gemm import CHECK_ROWS

CUBLAS_WORKSPACE_BYTES = 32 << 20   # torch's default cuBLAS workspace on sm90+ (":4096:8"), per stream
F64 = 8


def gemm_shape(case) -> tuple[int, int, int]:
    return tuple(int(case.param(p)) for p in ("gemm_m", "gemm_n", "gemm_k"))


def interference_plan(case, world_size: int) -> MemoryPlan | None:
    comm = collective_plan(dataclasses.replace(case, bitwise_repeats=0), world_size, 0)
    if comm is None:
        return None
    m, n, k = gemm_shape(case)
    elem = dtypes.size_bytes(case.dtype)
    a, b, c = m * k * elem, k * n * elem, m * n * elem
    parts = {**dict(comm.parts), "GEMM A": a, "GEMM B": b, "GEMM C": c,
             "cuBLAS workspace": CUBLAS_WORKSPACE_BYTES}
    transient = {**dict(comm.transient), "GEMM check rows": min(CHECK_ROWS, m) * n * (elem + F64)}
    return MemoryPlan.of(parts, transient, note=comm.note)
