"""NVSHMEM point-to-point ops as the native timed loop enqueues them (cb_shmem_enqueue in
kernels/nvshmem_ops.cu): the same calls p2p.run makes, with Python entered once per timed batch.
A row's ``native`` names its kind per initiator; ops without one stay on the Python path."""
from __future__ import annotations

import ctypes

from ...measure.native_loop import NativeOp
from .state import SCOPES

KINDS = {"none": 0, "host_rma": 1, "host_p": 2, "rma_bw": 3, "p": 4, "fetch_add": 5}


class _Op(ctypes.Structure):  # struct cb_shmem_op
    _fields_ = [("kind", ctypes.c_int), ("pe", ctypes.c_int), ("dst", ctypes.c_void_p), ("src", ctypes.c_void_p),
                ("bytes", ctypes.c_size_t), ("nbi", ctypes.c_int), ("is_get", ctypes.c_int),
                ("scope", ctypes.c_int), ("reps", ctypes.c_int), ("num_ctas", ctypes.c_int),
                ("threads", ctypes.c_int), ("inc", ctypes.c_uint64), ("values_host", ctypes.c_void_p)]


def kind(op, initiator: str, initiates: bool) -> str | None:
    """Which enqueue the op is on this PE, or None when it has no native form (put_signal and
    atomic_fetch_add, whose waits and checks count the launches p2p.run makes; latency loops)."""
    name = op.native.get(initiator)
    if name is None:
        return None
    return name if initiates else "none"


def native_op(st) -> NativeOp | None:
    """A NativeOp for a P2PState, or None when the op stays on the Python path."""
    k = kind(st.op, st.initiator, st.pair.initiates)
    if k is None:
        return None
    p, b = st.prm, st.bufs
    units = st.size_bytes // st.op.word_bytes if st.op.word_bytes else st.size_bytes   # words or bytes
    spec = _Op(kind=KINDS[k], pe=st.pair.peer, dst=b.b, src=b.a, bytes=units, nbi=int(p["nbi"]),
               is_get=int(st.op.is_get), scope=SCOPES[p["scope"]], reps=p["reps"], num_ctas=p["num_ctas"],
               threads=p["threads"], inc=st.pe.handle.pe + 1,
               values_host=st.host_words.ctypes.data if st.host_words is not None else None)
    fn = ctypes.cast(st.pe.lib.cb_shmem_enqueue, ctypes.c_void_p).value
    return NativeOp(fn=fn, arg=ctypes.addressof(spec), describe=lambda code: f"{st.op.name} enqueue: cudaError {code}",
                    keep=(spec, st.host_words))
