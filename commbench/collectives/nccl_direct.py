"""NCCL called directly (ctypes on libnccl), as nccl-tests does: true out-of-place forms,
alltoall and sendrecv as grouped send/recv, no framework overhead per op.

The communicator is built from an ncclUniqueId broadcast over MPI. Buffers are
torch CUDA tensors (their device pointers); ops go on the torch current stream.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

from ..errors import SkipCase
from ..families.base import RankContext

NCCL_DTYPE = {"int32": 2, "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
NCCL_OP = {"sum": 0, "prod": 1, "max": 2, "min": 3}


class NcclError(RuntimeError):
    pass


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def _find_library() -> ctypes.CDLL:
    candidates = []
    try:
        import nvidia.nccl  # the wheel torch uses

        candidates += [str(Path(p) / "lib" / "libnccl.so.2") for p in nvidia.nccl.__path__]
    except ImportError:
        pass
    candidates += ["libnccl.so.2", "libnccl.so"]
    for cand in candidates:
        try:
            return ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
    raise SkipCase("libnccl not found (install nvidia-nccl-cu13 or put libnccl.so.2 on LD_LIBRARY_PATH)")


class Nccl:
    """A thin, typed wrapper over the NCCL calls nccl-tests uses."""

    def __init__(self):
        lib = self.lib = _find_library()
        vp, sz, i, c = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p
        sigs = {
            "ncclAllReduce": [vp, vp, sz, i, i, c, vp],
            "ncclAllGather": [vp, vp, sz, i, c, vp],
            "ncclReduceScatter": [vp, vp, sz, i, i, c, vp],
            "ncclBroadcast": [vp, vp, sz, i, i, c, vp],
            "ncclReduce": [vp, vp, sz, i, i, i, c, vp],
            "ncclSend": [vp, sz, i, i, c, vp],
            "ncclRecv": [vp, sz, i, i, c, vp],
            "ncclGroupStart": [],
            "ncclGroupEnd": [],
            "ncclCommDestroy": [c],
            "ncclGetUniqueId": [ctypes.POINTER(_UniqueId)],
            "ncclCommInitRank": [ctypes.POINTER(c), i, _UniqueId, i],
            "ncclGetVersion": [ctypes.POINTER(i)],
        }
        for name, args in sigs.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        lib.ncclGetErrorString.argtypes, lib.ncclGetErrorString.restype = [i], ctypes.c_char_p

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise NcclError(f"{what}: {self.lib.ncclGetErrorString(rc).decode()} (ncclResult {rc})")

    def version(self) -> str:
        v = ctypes.c_int()
        self.check(self.lib.ncclGetVersion(ctypes.byref(v)), "ncclGetVersion")
        code = v.value
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"

    def unique_id(self) -> bytes:
        uid = _UniqueId()
        self.check(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        return bytes(uid.internal)

    def init_rank(self, nranks: int, uid: bytes, rank: int) -> ctypes.c_void_p:
        comm = ctypes.c_void_p()
        u = _UniqueId()
        ctypes.memmove(ctypes.byref(u), uid, 128)
        self.check(self.lib.ncclCommInitRank(ctypes.byref(comm), nranks, u, rank), "ncclCommInitRank")
        return comm


def communicator(ctx: RankContext):
    """(Nccl, comm) for this launch, created once; destroyed when the launch ends."""
    if "nccl_direct" in ctx.cache:
        return ctx.cache["nccl_direct"]
    nccl = Nccl()
    world = ctx.world
    uid = world.bcast(nccl.unique_id() if world.is_root else None)
    comm = nccl.init_rank(world.size, uid, world.rank)
    ctx.cache["nccl_direct"] = (nccl, comm)
    ctx.on_close(lambda: nccl.lib.ncclCommDestroy(comm))
    return ctx.cache["nccl_direct"]


class _CurrentStream:
    """Passed to ctypes as the torch current stream at call time (so graph capture sees it)."""

    def __init__(self):
        import torch

        self._current = torch.cuda.current_stream

    @property
    def _as_parameter_(self):
        return ctypes.c_void_p(self._current().cuda_stream)


def make_runner(op: str, bufs, nccl: Nccl, comm, n: int, rank: int, dtype: str, rop: str):
    """A zero-argument callable that enqueues one ``op`` on the torch current stream."""
    lib, chk = nccl.lib, nccl.check
    dt, red, st = NCCL_DTYPE[dtype], NCCL_OP[rop], _CurrentStream()
    s, r, c = ctypes.c_void_p(bufs.send.data_ptr()), ctypes.c_void_p(bufs.recv.data_ptr()), bufs.count
    elem = bufs.send.element_size()
    if op == "all_reduce":
        return lambda: chk(lib.ncclAllReduce(s, r, c, dt, red, comm, st), "ncclAllReduce")
    if op == "all_gather":
        return lambda: chk(lib.ncclAllGather(s, r, c, dt, comm, st), "ncclAllGather")
    if op == "reduce_scatter":
        return lambda: chk(lib.ncclReduceScatter(s, r, c, dt, red, comm, st), "ncclReduceScatter")
    if op == "broadcast":
        return lambda: chk(lib.ncclBroadcast(s, r, c, dt, 0, comm, st), "ncclBroadcast")
    if op == "reduce":
        return lambda: chk(lib.ncclReduce(s, r, c, dt, red, 0, comm, st), "ncclReduce")
    if op == "alltoall":
        base_s, base_r = bufs.send.data_ptr(), bufs.recv.data_ptr()

        def alltoall():
            chk(lib.ncclGroupStart(), "ncclGroupStart")
            for peer in range(n):
                chk(lib.ncclSend(ctypes.c_void_p(base_s + peer * c * elem), c, dt, peer, comm, st), "ncclSend")
                chk(lib.ncclRecv(ctypes.c_void_p(base_r + peer * c * elem), c, dt, peer, comm, st), "ncclRecv")
            chk(lib.ncclGroupEnd(), "ncclGroupEnd")
        return alltoall
    if op == "sendrecv":
        to, frm = (rank + 1) % n, (rank - 1) % n

        def sendrecv():
            chk(lib.ncclGroupStart(), "ncclGroupStart")
            chk(lib.ncclSend(s, c, dt, to, comm, st), "ncclSend")
            chk(lib.ncclRecv(r, c, dt, frm, comm, st), "ncclRecv")
            chk(lib.ncclGroupEnd(), "ncclGroupEnd")
        return sendrecv
    raise ValueError(op)
