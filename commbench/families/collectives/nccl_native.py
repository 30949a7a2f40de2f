"""The `nccl` backend's op as native code enqueues it (kernels/nccl_enqueue.cu).

The timed loop calls libnccl through the entry points of the library commbench loaded
(commbench.nccl_lib), so timing and checking use one NCCL.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

from ... import nccl_lib
from ...measure.native_loop import NativeOp

KINDS = {"all_reduce": 0, "all_gather": 1, "reduce_scatter": 2, "broadcast": 3, "reduce": 4,
         "alltoall": 5, "sendrecv": 6}
_ENTRY_POINTS = ("ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast", "ncclReduce",
                 "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd")


class _Api(ctypes.Structure):  # struct cb_nccl_api
    _fields_ = [(name, ctypes.c_void_p) for name in
                ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "send", "recv",
                 "group_start", "group_end", "all_to_all")]


class _Op(ctypes.Structure):  # struct cb_nccl_op
    _fields_ = [("api", ctypes.POINTER(_Api)), ("kind", ctypes.c_int), ("send", ctypes.c_void_p),
                ("recv", ctypes.c_void_p), ("count", ctypes.c_size_t), ("elem_bytes", ctypes.c_size_t),
                ("dtype", ctypes.c_int), ("redop", ctypes.c_int), ("root", ctypes.c_int), ("rank", ctypes.c_int),
                ("nranks", ctypes.c_int), ("comm", ctypes.c_void_p), ("shift_bytes", ctypes.c_size_t),
                ("steps", ctypes.c_size_t), ("calls", ctypes.c_size_t)]


@lru_cache(maxsize=None)
def _api() -> _Api:
    lib = nccl_lib.library()
    api = [ctypes.cast(getattr(lib, name), ctypes.c_void_p).value for name in _ENTRY_POINTS]
    alltoall = ctypes.cast(lib.ncclAlltoAll, ctypes.c_void_p).value if nccl_lib.has_alltoall() else None
    return _Api(*api, alltoall)


@lru_cache(maxsize=None)
def _enqueue_address() -> int:
    from ... import jit

    return ctypes.cast(jit.load("nccl_enqueue").cb_nccl_enqueue, ctypes.c_void_p).value


def _describe(code: int) -> str:
    return nccl_lib.library().ncclGetErrorString(code).decode(errors="replace")


def native_op(op: str, bufs, comm: nccl_lib.Comm, n: int, rank: int, dtype: str, rop: str) -> NativeOp:
    """The same call make_runner enqueues (same buffers, counts, peers), for the native loop; its
    consecutive calls rotate through the buffers' pool (buffers.Buffers.steps), as nccl-tests."""
    api = _api()
    spec = _Op(ctypes.pointer(api), KINDS[op], bufs.send.data_ptr(), bufs.recv.data_ptr(), bufs.count,
               bufs.send.element_size(), nccl_lib.NCCL_DTYPES[dtype], nccl_lib.NCCL_OPS[rop], 0, rank, n,
               comm.handle, bufs.shift_bytes, bufs.steps, 0)
    return NativeOp(fn=_enqueue_address(), arg=ctypes.addressof(spec), describe=_describe,
                    keep=(spec, api, bufs))
