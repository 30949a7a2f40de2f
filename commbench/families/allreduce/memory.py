"""The device memory of one rank of an all-reduce Case (AllReduceFamily.memory_bytes).

Per rank, by backend: NCCL's send and receive buffers (ordinary, or ncclMemAlloc'd and registered
as windows for nccl_symm); torch symmetric memory's symmetric input and ordinary output; commbench's
kernels' peer-visible allocation (the input padded to whole vectors of every rank, the two-shot
scratch of one rank's share, the flags) and the padded output. Beside them the pattern's
chunk-sized temporaries while an input is rewritten or a result checked (at most
data.CHECK_BYTES_PER_ELEM per element of a chunk). Not counted: NCCL's internal buffers and the
signal pads of torch symmetric memory (the runner keeps 1 GiB of headroom for such things).
"""
from __future__ import annotations

from ...measure.memory import MemoryPlan
from . import cb_backend, data

CB_FLAG_ALLOWANCE_BYTES = 1 << 20   # kernels/allreduce.cu's flags (cb_allreduce_flag_bytes), rounded up


def allreduce_plan(case, world_size: int) -> MemoryPlan:
    elem = data.ELEMENT_BYTES[case.dtype]
    count = case.size_bytes // elem
    nbytes = count * elem
    if case.backend.startswith("cb_"):
        lay = cb_backend.layout(nbytes, world_size, CB_FLAG_ALLOWANCE_BYTES)
        padded = lay["num_vecs"] * cb_backend.VEC_BYTES
        parts = {"peer-visible input, scratch and flags": lay["total"], "output": padded}
    elif case.backend.startswith("torch_"):
        parts = {"symmetric input": nbytes, "output": nbytes}
    else:
        parts = {"send buffer": nbytes, "receive buffer": nbytes}
    check = min(count, data.CHUNK_ELEMS) * data.CHECK_BYTES_PER_ELEM
    return MemoryPlan.of(parts, {"pattern and check": check},
                         note="NCCL's own buffers and symmetric-memory signal pads are not counted")
