"""A small ctypes binding of libnccl: communicators, entry points for native code, window registration.

Talking to NCCL directly (not through torch.distributed) lets a Case pass its
own stream, use true out-of-place forms, ``ncclMemAlloc`` +
``ncclCommWindowRegister`` (symmetric buffers, NCCL >= 2.27), and read NCCL's
own error strings. Shared by the collectives and allreduce families.
"""
from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from pathlib import Path

from .errors import CommbenchError

NCCL_DTYPES = {"int32": 2, "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
NCCL_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}
NCCL_SUM = 0
NCCL_WIN_COLL_SYMMETRIC = 0x01


class NcclError(CommbenchError):
    """A libnccl call failed; the message has NCCL's own text."""


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_ubyte * 128)]


def uid_to_bytes(uid: UniqueId) -> bytes:
    # all 128 bytes: the id holds NULs, and c_char conversion would stop at the first one
    return ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid))


def uid_from_bytes(raw: bytes) -> UniqueId:
    if len(raw) != ctypes.sizeof(UniqueId):
        raise ValueError(f"ncclUniqueId must be {ctypes.sizeof(UniqueId)} bytes, got {len(raw)}")
    return UniqueId.from_buffer_copy(raw)


@lru_cache(maxsize=None)
def library() -> ctypes.CDLL:
    """libnccl: $COMMBENCH_NCCL_LIB, else the one torch ships (nvidia-nccl wheel), else the system's."""
    candidates = [os.environ.get("COMMBENCH_NCCL_LIB")]
    try:
        import nvidia.nccl

        candidates += [str(Path(p) / "lib" / "libnccl.so.2") for p in nvidia.nccl.__path__]
    except ImportError:
        pass
    candidates.append("libnccl.so.2")
    errors = []
    for cand in candidates:
        if not cand:
            continue
        try:
            lib = ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            errors.append(f"{cand}: {exc}")
            continue
        _declare(lib)
        return lib
    raise NcclError("libnccl.so.2 not found (" + "; ".join(errors) + "); set COMMBENCH_NCCL_LIB")


def _declare(lib: ctypes.CDLL) -> None:
    vp, sz, c_int = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclGetErrorString.argtypes = [c_int]
    lib.ncclGetLastError.restype = ctypes.c_char_p
    lib.ncclGetLastError.argtypes = [vp]
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(vp), c_int, UniqueId, c_int]
    # the collectives are called from native code (kernels/nccl_enqueue.cu) through entry_point();
    # Python calls only all_reduce (Comm.all_reduce, the allreduce family's nccl baseline)
    lib.ncclAllReduce.argtypes = [vp, vp, sz, c_int, c_int, vp, vp]
    lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
    lib.ncclGetVersion.argtypes = [ctypes.POINTER(c_int)]
    lib.ncclCommDestroy.argtypes = [vp]
    if hasattr(lib, "ncclMemAlloc"):
        lib.ncclMemAlloc.argtypes = [ctypes.POINTER(vp), sz]
        lib.ncclMemFree.argtypes = [vp]
    if hasattr(lib, "ncclCommWindowRegister"):
        lib.ncclCommWindowRegister.argtypes = [vp, vp, sz, ctypes.POINTER(vp), c_int]
        lib.ncclCommWindowDeregister.argtypes = [vp, vp]


def _check(result: int, what: str, comm: int | None = None) -> None:
    if result != 0:
        lib = library()
        detail = lib.ncclGetLastError(comm).decode(errors="replace") if comm is not None else ""
        raise NcclError(f"{what} failed: {lib.ncclGetErrorString(result).decode()}"
                        + (f" ({detail})" if detail else ""))


def version() -> int:
    """NCCL version code, e.g. 22809 for 2.28.9."""
    v = ctypes.c_int()
    _check(library().ncclGetVersion(ctypes.byref(v)), "ncclGetVersion")
    return v.value


def version_str(code: int) -> str:
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def has_windows() -> bool:
    lib = library()
    return hasattr(lib, "ncclCommWindowRegister") and hasattr(lib, "ncclMemAlloc") and version() >= 22700


class Comm:
    """One NCCL communicator over the MPI world (collective constructor)."""

    def __init__(self, world):
        uid = UniqueId()
        if world.rank == 0:
            _check(library().ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        raw = world.comm.bcast(uid_to_bytes(uid) if world.rank == 0 else None, root=0)
        handle = ctypes.c_void_p()
        _check(library().ncclCommInitRank(ctypes.byref(handle), world.size, uid_from_bytes(raw), world.rank),
               "ncclCommInitRank")
        self.handle = handle.value

    def all_reduce(self, send_ptr: int, recv_ptr: int, count: int, dtype: str, stream: int) -> None:
        _check(library().ncclAllReduce(send_ptr, recv_ptr, count, NCCL_DTYPES[dtype], NCCL_SUM,
                                       self.handle, stream), "ncclAllReduce", self.handle)

    def register_window(self, ptr: int, nbytes: int) -> int:
        win = ctypes.c_void_p()
        _check(library().ncclCommWindowRegister(self.handle, ptr, nbytes, ctypes.byref(win),
                                                NCCL_WIN_COLL_SYMMETRIC), "ncclCommWindowRegister", self.handle)
        return win.value

    def deregister_window(self, win: int) -> None:
        _check(library().ncclCommWindowDeregister(self.handle, win), "ncclCommWindowDeregister", self.handle)

    def destroy(self) -> None:
        if self.handle:
            _check(library().ncclCommDestroy(self.handle), "ncclCommDestroy")
            self.handle = None


def mem_alloc(nbytes: int) -> int:
    ptr = ctypes.c_void_p()
    _check(library().ncclMemAlloc(ctypes.byref(ptr), nbytes), "ncclMemAlloc")
    return ptr.value


def mem_free(ptr: int) -> None:
    _check(library().ncclMemFree(ptr), "ncclMemFree")


def entry_point(name: str) -> int | None:
    """Address of libnccl's function ``name`` (for native code that calls NCCL), None when this
    libnccl does not export it (e.g. ncclGather before NCCL 2.28)."""
    lib = library()
    if not hasattr(lib, name):
        return None
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
