"""The `nccl` backend: libnccl called directly (commbench.nccl_lib), as nccl-tests does:
true out-of-place forms, alltoall and sendrecv as grouped send/recv, no framework
overhead per op. Ops go on the torch current stream at call time, so CUDA-graph
capture (which switches the current stream) records them.
"""
from __future__ import annotations

import ctypes

from ... import nccl_lib
from ...errors import SkipCase
from ...comm.context import RankContext

_KEY = "nccl_comm"


def communicator(ctx: RankContext) -> nccl_lib.Comm:
    """The launch's NCCL communicator over the MPI world (created once, destroyed at the end)."""
    if _KEY not in ctx.cache:
        try:
            nccl_lib.library()
        except nccl_lib.NcclError as exc:
            raise SkipCase(str(exc)) from None
        comm = nccl_lib.Comm(ctx.world)
        ctx.cache[_KEY] = comm
        ctx.on_close(comm.destroy)
    return ctx.cache[_KEY]


def raw_stream_getter():
    """A cheap callable returning the torch current stream's cudaStream_t (an int).

    torch's raw getter skips building a Stream object per call (a few us of host
    time per op, which small-message events timing sees); older builds fall
    back to ``torch.cuda.current_stream().cuda_stream``.
    """
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        device = torch.cuda.current_device()
        return lambda: raw(device)
    return lambda: torch.cuda.current_stream().cuda_stream


class _CurrentStream:
    """ctypes argument that is the torch current stream at the moment of the call."""

    def __init__(self):
        self._get = raw_stream_getter()

    @property
    def _as_parameter_(self):
        return ctypes.c_void_p(self._get())


def make_runner(op: str, bufs, comm: nccl_lib.Comm, n: int, rank: int, dtype: str, rop: str):
    """A zero-argument callable that enqueues one ``op``."""
    lib, h = nccl_lib.library(), comm.handle
    dt, red, st = nccl_lib.NCCL_DTYPES[dtype], nccl_lib.NCCL_OPS[rop], _CurrentStream()
    s, r, c = bufs.send.data_ptr(), bufs.recv.data_ptr(), bufs.count
    elem = bufs.send.element_size()

    def chk(result: int, what: str) -> None:
        nccl_lib._check(result, what, h)

    if op == "all_reduce":
        return lambda: chk(lib.ncclAllReduce(s, r, c, dt, red, h, st), "ncclAllReduce")
    if op == "all_gather":
        return lambda: chk(lib.ncclAllGather(s, r, c, dt, h, st), "ncclAllGather")
    if op == "reduce_scatter":
        return lambda: chk(lib.ncclReduceScatter(s, r, c, dt, red, h, st), "ncclReduceScatter")
    if op == "broadcast":
        return lambda: chk(lib.ncclBroadcast(s, r, c, dt, 0, h, st), "ncclBroadcast")
    if op == "reduce":
        return lambda: chk(lib.ncclReduce(s, r, c, dt, red, 0, h, st), "ncclReduce")
    if op == "alltoall" and nccl_lib.has_alltoall():
        return lambda: chk(lib.ncclAlltoAll(s, r, c, dt, h, st), "ncclAlltoAll")
    if op == "alltoall":
        def alltoall():
            chk(lib.ncclGroupStart(), "ncclGroupStart")
            for peer in range(n):
                chk(lib.ncclSend(s + peer * c * elem, c, dt, peer, h, st), "ncclSend")
                chk(lib.ncclRecv(r + peer * c * elem, c, dt, peer, h, st), "ncclRecv")
            chk(lib.ncclGroupEnd(), "ncclGroupEnd")
        return alltoall
    if op == "sendrecv":
        to, frm = (rank + 1) % n, (rank - 1) % n

        def sendrecv():
            chk(lib.ncclGroupStart(), "ncclGroupStart")
            chk(lib.ncclSend(s, c, dt, to, h, st), "ncclSend")
            chk(lib.ncclRecv(r, c, dt, frm, h, st), "ncclRecv")
            chk(lib.ncclGroupEnd(), "ncclGroupEnd")
        return sendrecv
    raise ValueError(op)
