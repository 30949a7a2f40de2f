"""NVSHMEM point-to-point ops as the native timed loop enqueues them (cb_shmem_enqueue in
kernels/nvshmem_ops.cu): the same calls p2p.run makes, with Python entered once per timed batch."""
from __future__ import annotations

import ctypes

from ...measure.native_loop import NativeOp

KINDS = {"none": 0, "host_rma": 1, "host_p": 2, "rma_bw": 3, "p": 4, "fetch_add": 5}
SCOPES = {"thread": 0, "warp": 1, "block": 2}


class _Op(ctypes.Structure):  # struct cb_shmem_op
    _fields_ = [("kind", ctypes.c_int), ("pe", ctypes.c_int), ("dst", ctypes.c_void_p), ("src", ctypes.c_void_p),
                ("bytes", ctypes.c_size_t), ("nbi", ctypes.c_int), ("is_get", ctypes.c_int),
                ("scope", ctypes.c_int), ("reps", ctypes.c_int), ("num_ctas", ctypes.c_int),
                ("threads", ctypes.c_int), ("inc", ctypes.c_uint64), ("values_host", ctypes.c_void_p)]


def _kind(op: str, backend: str, initiator: bool) -> str | None:
    """Which enqueue the op is, or None when it has no native form (put_signal and atomic_fetch_add,
    whose expected values follow the launch count; latency loops)."""
    if op in ("put_signal", "atomic_fetch_add", "put_latency", "get_latency", "pingpong"):
        return None
    if not initiator:
        return "none"
    host = backend == "nvshmem_host"
    if op in ("put", "get"):
        return "host_rma" if host else "rma_bw"
    if op == "p":
        return "host_p" if host else "p"
    return None  # atomic_fetch_add: its check counts the launches p2p.run makes, so it stays in Python


def native_op(st) -> NativeOp | None:
    """A NativeOp for a P2PState, or None when the op stays on the Python path."""
    kind = _kind(st.op, st.backend, st.initiator)
    if kind is None:
        return None
    p, b, a, c = st.prm, st.ptrs["b"], st.ptrs["a"], st.ptrs["c"]
    words = st.size_bytes // (8 if st.op == "atomic_fetch_add" else 4)
    spec = _Op(kind=KINDS[kind], pe=st.peer, dst=b, src=c if st.op == "atomic_fetch_add" else a,
               bytes=words if st.op in ("p", "atomic_fetch_add") else st.size_bytes, nbi=int(p["nbi"]),
               is_get=int(st.op == "get"), scope=SCOPES[p["scope"]], reps=p["reps"], num_ctas=p["num_ctas"],
               threads=p["threads"], inc=st.handle.pe + 1,
               values_host=st.host_words.ctypes.data if st.host_words is not None else None)
    fn = ctypes.cast(st.lib.cb_shmem_enqueue, ctypes.c_void_p).value
    return NativeOp(fn=fn, arg=ctypes.addressof(spec), describe=lambda code: f"{st.op} enqueue: cudaError {code}",
                    keep=(spec, st.host_words))
