"""The device memory of one rank of a collective's buffers on a GPU (Collectives.memory_bytes and the
interference family's collective), as comm/buffers.allocate makes them.

Per rank: the send and receive buffers as comm/buffers.allocate makes them (nccl-tests' in-place
aliasing keeps one; a buffer that holds every rank's chunk is n x count elements), each the head
of its rotation pool when the native loop rotates (a pool spans ``buffer_span_bytes``, at least
the buffer), and the check's chunk-sized 8-byte temporaries (buffers.CHUNK elements: the int64 index
and the pattern's arithmetic for the expected values, then the float64 result and expected values,
|difference|, |expected| and the tolerance times it: seven at the peak; measured 3.4 GiB above the
buffers at 64 Mi elements, all_reduce 4 GiB float32 on an H100, 2026-12-07), or,
when larger, what `check: bitwise` holds after it: a copy of the result (measure/bitwise.py) and
the known answer's chunk.
alltoallv (a traffic matrix decides its buffers) has no plan.
"""
from __future__ import annotations

from .. import dtypes, metrics
from ..comm.ops import OPS
from .memory import MemoryPlan

CHECK_CHUNK_ELEMS = 1 << 26   # comm/buffers.CHUNK
F64 = 8
CHECK_TEMPORARIES = 7   # chunk-sized 8-byte arrays alive at the check's peak (comm/buffers.mismatches)


def collective_plan(case, world_size: int, span_bytes: int) -> MemoryPlan | None:
    if case.op not in OPS or case.op == "alltoallv":
        return None
    elem = dtypes.size_bytes(case.dtype)
    count = metrics.element_count(case.op, case.size_bytes, elem, world_size)
    spec = OPS[case.op]
    send = count * elem * (world_size if spec.send_chunks else 1)
    recv = count * elem * (world_size if spec.recv_chunks else 1)
    pool = lambda nbytes: max(nbytes, span_bytes)  # noqa: E731
    parts = ({"buffer (in place)": pool(max(send, recv))} if case.param("in_place")
             else {"send buffer": pool(send), "receive buffer": pool(recv)})
    chunk = min(recv // max(elem, 1), CHECK_CHUNK_ELEMS)
    check = CHECK_TEMPORARIES * F64 * chunk
    transient = {"check": check}
    if case.bitwise_repeats:   # check: bitwise: a copy of the result, the known answer's chunk, its cast and |max|
        transient["bitwise reference"] = recv + 3 * F64 * chunk
    return MemoryPlan.of(parts, transient, note="NCCL's own buffers are not counted")
