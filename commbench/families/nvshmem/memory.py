"""The device memory of one PE of an nvshmem Case (Nvshmem.memory_bytes), and the symmetric heap's
own limit (Nvshmem.machine_reason and setup).

Per PE: the Case's symmetric buffers, which ``comm.nvshmem.NvshmemHandle.buffer`` takes from the
NVSHMEM symmetric heap (point-to-point: source ``a``, destination ``b``, fetched values ``c``, each
the message size, and a signal word; a collective: its source and destination, n blocks on a side
that holds one per PE); a few small torch tensors (timeout flag, in-kernel timer stamps); and,
while the pattern is written or checked, one chunk's temporaries (buffers.py).

The heap, as NVSHMEM 3.4 (the nvidia-nvshmem wheel the kernels link) sizes it when it starts, once
per launch (src/host/mem/mem_heap.cpp):

- dynamic (CUDA VMM: NVSHMEM's default on x86 when the GPU reports VMM and GPUDirect RDMA with
  VMM): it reserves NVSHMEM_MAX_MEMORY_PER_GPU (128 GiB) of address space and maps GPU memory when
  an nvshmem_malloc does not fit what is mapped, in whole NVSHMEM_CUMEM_GRANULARITY (512 MiB)
  granules. NVSHMEM_SYMMETRIC_SIZE does not limit it; the GPU's free memory does (the runner's fit
  check of this plan). The plan rounds the buffers up to whole granules ("heap granule
  rounding"): the most growing the heap for them takes.
- static (NVSHMEM_DISABLE_CUDA_VMM=1, or a GPU without those attributes): NVSHMEM_SYMMETRIC_SIZE
  (1 GiB by default) beside NVSHMEM's own reservations, taken whole at start-up; an
  nvshmem_malloc beyond it returns NULL ("nvshmem_malloc(...) failed").

Either way NVSHMEM keeps what it mapped until it is finalised, and the handle's pool is grow-only:
buffers of earlier Cases of the launch stay in the heap (``heap_reason`` counts them in set-up).
Not counted in the plan: NVSHMEM's start-up (its own reservations and internal buffers; the whole
static heap), taken once per launch by its first Case, and the CUDA modules of the kernels
libraries (the runner's 1 GiB headroom).
"""
from __future__ import annotations

import math
import re
from typing import Mapping

from ... import metrics
from ...dtypes import BYTES as ELEM_BYTES
from ...measure.memory import MemoryPlan, gib, torch_alloc_bytes
from . import buffers
from .coll import buffer_counts
from .ops import COLL, OPS

MIN_BUFFER_BYTES = 256            # NvshmemHandle.buffer's smallest allocation
SIGNAL_BYTES = 64                 # p2p.setup's signal words
SYMMETRIC_SIZE_DEFAULT = 1 << 30            # NVSHMEM_SYMMETRIC_SIZE's default
MAX_MEMORY_PER_GPU_DEFAULT = 128 << 30      # NVSHMEM_MAX_MEMORY_PER_GPU's default (NVSHMEM 3.4)
CUMEM_GRANULARITY_DEFAULT = 512 << 20       # NVSHMEM_CUMEM_GRANULARITY's default
_SIZE = re.compile(r"\s*(\d*\.?\d+)\s*([kKmMgGtT]?)")
_TRUE = ("1", "y", "yes", "t", "true", "on")


def nvshmem_size(env: Mapping[str, str], name: str, default: int) -> int:
    """A size variable as NVSHMEM reads it: a number with an optional k/m/g/t (powers of 1024)
    suffix, anything after the suffix ignored ("20m", "3.1M", ".5g"); unset or unreadable: the
    default (NVSHMEM itself refuses to start on an unreadable one)."""
    m = _SIZE.match(env.get(name, "") or "")
    if not m:
        return default
    return int(math.ceil(float(m.group(1)) * 1024 ** " kmgt".index((m.group(2) or " ").lower())))


def static_heap(env: Mapping[str, str]) -> bool:
    """Whether the launch's environment fixes the heap at NVSHMEM_SYMMETRIC_SIZE (no CUDA VMM)."""
    return env.get("NVSHMEM_DISABLE_CUDA_VMM", "").strip().lower() in _TRUE


def symmetric_buffers(case, world_size: int) -> dict[str, int]:
    """The Case's symmetric buffers by their pool name (NvshmemHandle.buffer), in bytes."""
    op, elem = OPS[case.op], ELEM_BYTES[case.dtype]
    if op.kind == COLL:
        count = metrics.element_count(op.name, case.size_bytes, elem, world_size)
        n_src, n_dst, _ = buffer_counts(op, count, world_size)
        sizes = {"coll_src": n_src * elem, "coll_dst": n_dst * elem}
    else:
        sizes = {"a": case.size_bytes, "b": case.size_bytes, "c": case.size_bytes, "sig": SIGNAL_BYTES}
    return {name: max(int(b), MIN_BUFFER_BYTES) for name, b in sizes.items()}


def heap_text(env: Mapping[str, str]) -> str:
    """How the heap is sized under this environment (the plan's note)."""
    fixed = f"NVSHMEM_SYMMETRIC_SIZE = {gib(nvshmem_size(env, 'NVSHMEM_SYMMETRIC_SIZE', SYMMETRIC_SIZE_DEFAULT))}"
    if static_heap(env):
        return f"static heap: NVSHMEM_DISABLE_CUDA_VMM=1 fixes it at {fixed}, taken at NVSHMEM's start-up"
    granule = nvshmem_size(env, "NVSHMEM_CUMEM_GRANULARITY", CUMEM_GRANULARITY_DEFAULT)
    top = nvshmem_size(env, "NVSHMEM_MAX_MEMORY_PER_GPU", MAX_MEMORY_PER_GPU_DEFAULT)
    return (f"dynamic heap (CUDA VMM): grown from the free memory in {gib(granule)} granules up to "
            f"NVSHMEM_MAX_MEMORY_PER_GPU = {gib(top)} (a GPU without VMM fixes it at {fixed})")


def heap_reason(need: dict[str, int], env: Mapping[str, str], held: dict[str, int] | None = None) -> str | None:
    """Why the heap cannot hold the Case's buffers ``need`` (by pool name) beside what the pool
    already ``held`` (grow-only: it keeps each name's largest buffer), or None. The limit is
    NVSHMEM_SYMMETRIC_SIZE for a static heap, NVSHMEM_MAX_MEMORY_PER_GPU for a dynamic one."""
    held = held or {}
    mine = sum(need.values())
    total = sum(max(held.get(k, 0), need.get(k, 0)) for k in {*held, *need})
    if static_heap(env):
        var, limit = "NVSHMEM_SYMMETRIC_SIZE", nvshmem_size(env, "NVSHMEM_SYMMETRIC_SIZE", SYMMETRIC_SIZE_DEFAULT)
        why = "NVSHMEM_DISABLE_CUDA_VMM=1 fixes the heap at"
    else:
        var = "NVSHMEM_MAX_MEMORY_PER_GPU"
        limit = nvshmem_size(env, var, MAX_MEMORY_PER_GPU_DEFAULT)
        why = "the dynamic heap grows to at most"
    if total <= limit:
        return None
    kept = total - mine
    beside = f", beside {gib(kept)} that earlier Cases of this launch left in the pool" if kept > 0 else ""
    return (f"needs {gib(mine)} of NVSHMEM symmetric heap per PE{beside}; {why} {var} = {gib(limit)}: "
            f"raise {var} (the suite's env) to at least {gib(total)}")


def nvshmem_plan(case, world_size: int, env: Mapping[str, str]) -> MemoryPlan:
    """One PE's device memory for ``case`` (the module's docstring says what is counted)."""
    op, elem = OPS[case.op], ELEM_BYTES[case.dtype]
    heap = sum(symmetric_buffers(case, world_size).values())
    parts = {"symmetric buffers (NVSHMEM heap)": heap}
    if not static_heap(env):   # the dynamic heap maps whole granules
        granule = max(1, nvshmem_size(env, "NVSHMEM_CUMEM_GRANULARITY", CUMEM_GRANULARITY_DEFAULT))
        parts["heap granule rounding"] = -(-heap // granule) * granule - heap
    if op.kind == COLL:
        count = metrics.element_count(op.name, case.size_bytes, elem, world_size)
        n_src, n_dst, _ = buffer_counts(op, count, world_size)
        chunk = min(max(n_src, n_dst), buffers.CHUNK_ELEMS)
        transient = {"pattern and check": chunk * buffers.COLL_PEAK_PER_ELEM}
    else:   # the wait-timeout flag and the in-kernel timer stamps (one per iteration, and one more)
        parts["flag and timer stamps"] = torch_alloc_bytes(4) + torch_alloc_bytes(8 * (case.warmup + case.iters + 1))
        chunk = min(case.size_bytes // elem, buffers.CHUNK_ELEMS)
        transient = {"pattern and check": chunk * buffers.P2P_PEAK_PER_ELEM}
    note = (f"{heap_text(env)}; NVSHMEM's start-up (once per launch) and buffers earlier Cases left "
            f"in the grow-only pool are not counted")
    return MemoryPlan.of(parts, transient, note=note)

