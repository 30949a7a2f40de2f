"""kernels/copy.cu through ctypes: the op struct the native timed loop enqueues, pinned mapped
host memory, peer access and the SM count."""
from __future__ import annotations

import ctypes
from functools import lru_cache

from ... import jit

ENGINES = {"ce": 0, "sm": 1}


class CopyOp(ctypes.Structure):   # struct cb_copy_op (kernels/copy.cu), field for field
    _fields_ = [("engine", ctypes.c_int), ("bidir", ctypes.c_int),
                ("dst", ctypes.c_void_p), ("src", ctypes.c_void_p),
                ("dst2", ctypes.c_void_p), ("src2", ctypes.c_void_p),
                ("bytes", ctypes.c_size_t), ("stride", ctypes.c_size_t),
                ("slots", ctypes.c_int), ("next", ctypes.c_int),
                ("dev", ctypes.c_int), ("dev2", ctypes.c_int),
                ("blocks", ctypes.c_int), ("blocks2", ctypes.c_int),
                ("stream2", ctypes.c_void_p), ("fork", ctypes.c_void_p), ("join", ctypes.c_void_p)]


class CopyError(RuntimeError):
    """A CUDA call of the copy library failed."""


@lru_cache(maxsize=None)
def lib() -> ctypes.CDLL:
    so = jit.load("copy")
    vp, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    so.cb_copy_enqueue.argtypes = [vp, vp]
    so.cb_copy_bidir_make.argtypes = [ctypes.POINTER(CopyOp)]
    so.cb_copy_bidir_free.argtypes = [ctypes.POINTER(CopyOp)]
    so.cb_copy_host_alloc.argtypes = [sz, ctypes.POINTER(vp), ctypes.POINTER(vp)]
    so.cb_copy_host_free.argtypes = [vp]
    so.cb_copy_enable_peer.argtypes = [i, i, ctypes.POINTER(i)]
    so.cb_copy_sm_count.argtypes = [i, ctypes.POINTER(i)]
    so.cb_copy_error_string.argtypes = [i]
    so.cb_copy_error_string.restype = ctypes.c_char_p
    return so


def describe(err: int) -> str:
    return f"cudaError {err}: {lib().cb_copy_error_string(err).decode()}"


def _check(err: int, what: str) -> None:
    if err:
        raise CopyError(f"{what}: {describe(err)}")


def enqueue(op: CopyOp, stream_handle: int) -> None:
    _check(lib().cb_copy_enqueue(ctypes.addressof(op), stream_handle), "cb_copy_enqueue")


def enqueue_fn() -> int:
    """The address of cb_copy_enqueue, for measure.native_loop.NativeOp."""
    return ctypes.cast(lib().cb_copy_enqueue, ctypes.c_void_p).value


def bidir_make(op: CopyOp) -> None:
    _check(lib().cb_copy_bidir_make(ctypes.byref(op)), "bidir stream and events")


def bidir_free(op: CopyOp) -> None:
    _check(lib().cb_copy_bidir_free(ctypes.byref(op)), "bidir stream release")


def host_alloc(nbytes: int) -> tuple[int, int]:
    """(host address, device address) of ``nbytes`` of pinned, portable, mapped host memory."""
    host, dev = ctypes.c_void_p(), ctypes.c_void_p()
    _check(lib().cb_copy_host_alloc(nbytes, ctypes.byref(host), ctypes.byref(dev)), f"cudaHostAlloc({nbytes} B)")
    return host.value, dev.value


def host_free(host: int) -> None:
    _check(lib().cb_copy_host_free(host), "cudaFreeHost")


def enable_peer(dev: int, peer: int) -> bool:
    """Enable ``dev``'s access to ``peer``'s memory; False when the pair cannot have it."""
    can = ctypes.c_int(0)
    _check(lib().cb_copy_enable_peer(dev, peer, ctypes.byref(can)), f"peer access GPU {dev} -> GPU {peer}")
    return bool(can.value)


def sm_ctas(dev: int) -> int:
    """The SM kernel's default grid: a full load of CTAs on every SM of ``dev``."""
    sms = ctypes.c_int(0)
    _check(lib().cb_copy_sm_count(dev, ctypes.byref(sms)), "SM count")
    return sms.value * lib().cb_copy_ctas_per_sm()
