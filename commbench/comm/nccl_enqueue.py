"""The `nccl` backend: every op enqueued by kernels/nccl_enqueue.cu, the one native entry that the
timed loop (measure.native_loop), the per-op Python loop and the correctness check all call.

ops.OPS says which libnccl entry point each op calls; the C++ file has one row per op naming
how it calls it. The two tables are compared name for name when the library loads, and a
difference fails loudly. libnccl's entry points come from the library commbench loaded
(commbench.nccl_lib), so timing and checking use one NCCL, as nccl-tests' own loop does:
true out-of-place forms, no framework overhead per op.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

from .. import nccl_lib
from ..errors import CommbenchError
from .ops import OPS, ROOT

_P2P_ENTRY_POINTS = ("ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd")


class OpTableMismatch(CommbenchError):
    """kernels/nccl_enqueue.cu and ops.OPS do not list the same ops."""


class _P2p(ctypes.Structure):  # struct cb_nccl_p2p
    _fields_ = [(name, ctypes.c_void_p) for name in ("send", "recv", "group_start", "group_end")]


class _Op(ctypes.Structure):  # struct cb_nccl_op
    _fields_ = [("p2p", ctypes.POINTER(_P2p)), ("call", ctypes.c_void_p), ("kind", ctypes.c_int),
                ("send", ctypes.c_void_p), ("recv", ctypes.c_void_p), ("count", ctypes.c_size_t),
                ("elem_bytes", ctypes.c_size_t), ("dtype", ctypes.c_int), ("redop", ctypes.c_int),
                ("root", ctypes.c_int), ("rank", ctypes.c_int), ("nranks", ctypes.c_int),
                ("comm", ctypes.c_void_p), ("shift_bytes", ctypes.c_size_t), ("steps", ctypes.c_size_t),
                ("calls", ctypes.c_size_t)] + [(name, ctypes.POINTER(ctypes.c_size_t)) for name in (
                    "send_counts", "send_displs", "recv_counts", "recv_displs")]


def _size_array(values: list[int]):
    return (ctypes.c_size_t * max(1, len(values)))(*values)


def native_op_names(lib: ctypes.CDLL) -> list[str]:
    """The ops of the C++ table, in its row order (the row is the op's kind)."""
    lib.cb_nccl_op_name.argtypes = [ctypes.c_int]
    lib.cb_nccl_op_name.restype = ctypes.c_char_p
    names = []
    while (name := lib.cb_nccl_op_name(len(names))) is not None:
        names.append(name.decode())
    return names


def table_mismatch(native_names: list[str]) -> str | None:
    """Why the C++ op table and ops.OPS disagree, or None when they list the same ops once each."""
    problems = []
    only_py = [op for op in OPS if op not in native_names]
    only_c = [op for op in native_names if op not in OPS]
    twice = sorted({op for op in native_names if native_names.count(op) > 1})
    if only_py:
        problems.append(f"in ops.OPS but not in kernels/nccl_enqueue.cu: {', '.join(only_py)}")
    if only_c:
        problems.append(f"in kernels/nccl_enqueue.cu but not in ops.OPS: {', '.join(only_c)}")
    if twice:
        problems.append(f"twice in kernels/nccl_enqueue.cu: {', '.join(twice)}")
    return "; ".join(problems) or None


@lru_cache(maxsize=None)
def _library() -> tuple[ctypes.CDLL, dict[str, int]]:
    """The compiled kernels/nccl_enqueue.cu and its kind per op name, checked against ops.OPS."""
    from .. import jit

    lib = jit.load("nccl_enqueue")
    names = native_op_names(lib)
    problem = table_mismatch(names)
    if problem:
        raise OpTableMismatch(f"the nccl op tables disagree ({problem}): add the op's row on both sides")
    lib.cb_nccl_op_bytes.restype = ctypes.c_size_t
    if lib.cb_nccl_op_bytes() != ctypes.sizeof(_Op):
        raise OpTableMismatch(f"struct cb_nccl_op is {lib.cb_nccl_op_bytes()} bytes in kernels/nccl_enqueue.cu "
                              f"but {ctypes.sizeof(_Op)} in comm.nccl_enqueue._Op: update the mirror")
    lib.cb_nccl_enqueue.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cb_nccl_enqueue.restype = ctypes.c_int
    return lib, {name: kind for kind, name in enumerate(names)}


def entry_point(op: str) -> int | None:
    """Address of the libnccl entry point ``op`` calls, None when this NCCL lacks it (or the op
    is grouped send/recv by definition)."""
    spec = OPS[op]
    if not spec.nccl_call or nccl_lib.version() < spec.nccl_since:
        return None
    return nccl_lib.entry_point(spec.nccl_call)


def unavailable(op: str) -> str | None:
    """Why this libnccl cannot run ``op`` (its entry point is newer, and the op has no fallback)."""
    spec = OPS[op]
    if not spec.nccl_call or spec.nccl_fallback or entry_point(op) is not None:
        return None
    return (f"{op} needs {spec.nccl_call} (NCCL >= {nccl_lib.version_str(spec.nccl_since)}); "
            f"this libnccl is {nccl_lib.version_str(nccl_lib.version())}")


def call_name(op: str) -> str:
    """The NCCL call(s) ``op`` makes with this libnccl (the `nccl_call` column)."""
    spec = OPS[op]
    if spec.nccl_call and entry_point(op) is not None:
        return spec.nccl_call
    return spec.nccl_fallback or "grouped ncclSend/ncclRecv"


@lru_cache(maxsize=None)
def _p2p() -> _P2p:
    return _P2p(*(nccl_lib.entry_point(name) for name in _P2P_ENTRY_POINTS))


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


class NcclCall:
    """One op of the `nccl` backend on its buffers, as kernels/nccl_enqueue.cu enqueues it.

    ``native_fn``/``arg`` are the timed loop's op (the family wraps them in a NativeOp);
    :meth:`enqueue` is the same call from Python on the torch
    current stream (so CUDA-graph capture records it); :meth:`check_once` runs it once on the
    buffers' head slice for the correctness check. Consecutive calls rotate through the buffers'
    pool (buffers.Buffers.steps), as nccl-tests."""

    def __init__(self, op: str, bufs, comm: nccl_lib.Comm, n: int, rank: int, dtype: str, rop: str):
        lib, kinds = _library()
        p2p = _p2p()
        self.spec = _Op(ctypes.pointer(p2p), entry_point(op), kinds[op], bufs.send.data_ptr(),
                        bufs.recv.data_ptr(), bufs.count, bufs.send.element_size(), nccl_lib.NCCL_DTYPES[dtype],
                        nccl_lib.NCCL_OPS[rop], ROOT, rank, n, comm.handle, bufs.shift_bytes, bufs.steps, 0)
        arrays = ()
        if bufs.layout is not None:   # alltoallv: the traffic matrix's row and column of this rank
            lay = bufs.layout
            arrays = tuple(_size_array(v) for v in (lay.send_counts, lay.send_displs, lay.recv_counts,
                                                    lay.recv_displs))
            (self.spec.send_counts, self.spec.send_displs, self.spec.recv_counts,
             self.spec.recv_displs) = (ctypes.cast(a, ctypes.POINTER(ctypes.c_size_t)) for a in arrays)
        self._enqueue, self.arg, self._comm = lib.cb_nccl_enqueue, ctypes.addressof(self.spec), comm.handle
        self._stream = raw_stream_getter()
        self.what = call_name(op)
        # what the timed loop needs (measure.native_loop.NativeOp's fields): the entry point, its
        # argument, its error text and what must outlive the op
        self.native_fn = ctypes.cast(lib.cb_nccl_enqueue, ctypes.c_void_p).value
        self.native_keep = (self.spec, p2p, bufs, arrays)
        self.describe = _describe

    def enqueue(self) -> None:
        """One op on the torch current stream (the per-op Python loop)."""
        rc = self._enqueue(self.arg, self._stream())
        if rc:
            nccl_lib._check(rc, self.what, self._comm)

    def check_once(self, stream: int) -> None:
        """One op on the head slice of the buffers (what the check reads), enqueued on ``stream``."""
        self.spec.calls = 0
        rc = self._enqueue(self.arg, stream)
        if rc:
            nccl_lib._check(rc, self.what, self._comm)


def _describe(code: int) -> str:
    return nccl_lib.library().ncclGetErrorString(code).decode(errors="replace")
