"""The collective ops: one entry each holds everything commbench knows about an op apart from
how a backend calls it. metrics (count, algbw, busbw), buffers (layout, in-place aliasing,
expected result), the family (in-place form, reduction, extra columns), the nccl-tests importer
and the NVSHMEM collectives read this table; each backend has one line per op (the op table of
kernels/nccl_enqueue.cu, which comm.nccl_enqueue checks against this one when
it loads; mpi_data and torch_ops here).

Adding an op: an entry here, then its line in each backend.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import pattern

ROOT = 0  # the root of rooted ops (nccl-tests sweeps it; commbench uses rank 0)


@dataclass(frozen=True)
class CollectiveOp:
    name: str
    # size_bytes is n per-rank chunks (count = size / elem / n, algbw counts all n chunks), as
    # nccl-tests' all_gather, reduce_scatter and alltoall; else one whole buffer
    chunked: bool
    bus_factor: Callable[[int], float]   # busbw / algbw on n ranks (nccl-tests GetBw)
    reduces: bool                        # takes reduce_op
    send_chunks: bool                    # send buffer holds n chunks of count (else count)
    recv_chunks: bool                    # receive buffer holds n chunks of count (else count)
    # in place: "same" (one buffer), "recv_slice" (send is this rank's chunk of recv),
    # "send_slice" (recv is this rank's chunk of send), or the reason the op has no in-place form
    in_place: str
    # torch.distributed has no out-of-place form: out of place is a local copy plus the in-place op
    torch_local_copy: bool
    # expected(reduce_op, n, rank, count, j) -> values at result positions j, None when unchecked
    expected: Callable
    rooted: bool                         # data goes to or comes from rank ROOT only
    # nccl backend: the libnccl entry point kernels/nccl_enqueue.cu calls ("" = grouped
    # ncclSend/ncclRecv), the NCCL version that exports it (major*10000 + minor*100) and what runs
    # on an older NCCL ("" = nothing: the Case is skipped with the reason)
    nccl_call: str
    nccl_since: int = 0
    nccl_fallback: str = ""


def _all_reduce(rop, n, rank, count, j):
    return pattern.reduce_expected(rop, n, j)


def _all_gather(rop, n, rank, count, j):
    return pattern.values(j // count, j % count)


def _reduce_scatter(rop, n, rank, count, j):
    return pattern.reduce_expected(rop, n, rank * count + j)


def _alltoall(rop, n, rank, count, j):
    return pattern.values(j // count, rank * count + j % count)


def _broadcast(rop, n, rank, count, j):
    return pattern.values(ROOT, j)


def _reduce(rop, n, rank, count, j):
    return pattern.reduce_expected(rop, n, j) if rank == ROOT else None


def _sendrecv(rop, n, rank, count, j):
    return pattern.values((rank - 1) % n, j)


def _gather(rop, n, rank, count, j):
    return pattern.values(j // count, j % count) if rank == ROOT else None


def _scatter(rop, n, rank, count, j):
    return pattern.values(ROOT, rank * count + j)


def _alltoallv(rop, n, rank, count, j):
    return None   # per-block expectations from the traffic matrix: comm.alltoallv.count_wrong


def _no_in_place(op: str) -> str:
    return f"{op} has no in-place form (send and receive buffers must differ)"


def _all_reduce_bus(n: int) -> float:
    return 2.0 * (n - 1) / n


def _chunk_bus(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


OPS: dict[str, CollectiveOp] = {op.name: op for op in (
    #            name              chunked  bus factor       reduces send_n recv_n in place      torch copy  expected
    #            rooted  nccl call (, since, fallback)
    CollectiveOp("all_reduce",     False, _all_reduce_bus, True,  False, False, "same",        True,  _all_reduce,
                 False, "ncclAllReduce"),
    CollectiveOp("all_gather",     True,  _chunk_bus,      False, False, True,  "recv_slice",  False, _all_gather,
                 False, "ncclAllGather"),
    CollectiveOp("reduce_scatter", True,  _chunk_bus,      True,  True,  False, "send_slice",  False, _reduce_scatter,
                 False, "ncclReduceScatter"),
    CollectiveOp("alltoall",       True,  _chunk_bus,      False, True,  True,  _no_in_place("alltoall"),
                 False, _alltoall,
                 False, "ncclAlltoAll", 22800, "grouped ncclSend/ncclRecv"),
    # a traffic matrix (comm.traffic): size_bytes is what each sender sends in total (generators);
    # algbw counts the busiest rank's larger side (the family's traffic()), busbw = algbw (n-1)/n
    CollectiveOp("alltoallv",      False, _chunk_bus,      False, False, False, _no_in_place("alltoallv"),
                 False, _alltoallv,
                 False, ""),
    CollectiveOp("broadcast",      False, _one,            False, False, False, "same",        True,  _broadcast,
                 True,  "ncclBroadcast"),
    CollectiveOp("reduce",         False, _one,            True,  False, False, "same",        True,  _reduce,
                 True,  "ncclReduce"),
    CollectiveOp("sendrecv",       False, _one,            False, False, False, _no_in_place("sendrecv"),
                 False, _sendrecv,
                 False, ""),
    # nccl-tests: size_bytes is the root's whole buffer (n chunks of count), busbw = algbw (n-1)/n
    CollectiveOp("gather",         True,  _chunk_bus,      False, False, True,  "recv_slice",  False, _gather,
                 True,  "ncclGather", 22800),
    CollectiveOp("scatter",        True,  _chunk_bus,      False, True,  False, "send_slice",  False, _scatter,
                 True,  "ncclScatter", 22800),
)}
IN_PLACE_FORMS = ("same", "recv_slice", "send_slice")


def no_in_place_reason(op: str) -> str | None:
    """Why ``op`` cannot run in place, or None when it can."""
    form = OPS[op].in_place
    return None if form in IN_PLACE_FORMS else form
