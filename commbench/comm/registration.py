"""NCCL buffer registration for the `nccl` backend (the collectives' ``register`` parameter).

``user``: ncclCommRegister on the send and receive allocations (NCCL >= 2.19), so NCCL may skip
its internal staging copies; ``window``: ncclCommWindowRegister with the collective-symmetric flag
(NCCL >= 2.27), a collective call that lets NCCL run its symmetric-memory kernels. Both register
memory from ncclMemAlloc (as nccl-tests does), the whole allocation, once per Case. A refusal
(an error, or no handle back: NCCL_LOCAL_REGISTER=0 makes ncclCommRegister a no-op) skips the Case
with NCCL's reason: a registered row never hides an unregistered run.
"""
from __future__ import annotations

import ctypes

from .. import nccl_lib
from ..errors import SkipCase

MODES = ("none", "user", "window")
SINCE = {"user": 21900, "window": 22700}
ENTRY_POINTS = {"user": ("ncclCommRegister", "ncclCommDeregister"),
                "window": ("ncclCommWindowRegister", "ncclCommWindowDeregister")}
_REGISTER = {"user": ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                      ctypes.POINTER(ctypes.c_void_p)),
             "window": ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                        ctypes.POINTER(ctypes.c_void_p), ctypes.c_int)}
_DEREGISTER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class _CudaBytes:
    """__cuda_array_interface__ over raw device memory, so torch can view it (no copy)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (int(ptr), False),
                                         "version": 3, "strides": None}


def unsupported(mode: str) -> str | None:
    """Why this libnccl cannot register buffers in ``mode`` (None when it can)."""
    if mode == "none":
        return None
    code = nccl_lib.version()
    if code < SINCE[mode] or any(nccl_lib.entry_point(name) is None for name in ENTRY_POINTS[mode]):
        return (f"register={mode} needs {ENTRY_POINTS[mode][0]} (NCCL >= {nccl_lib.version_str(SINCE[mode])}); "
                f"this libnccl is {nccl_lib.version_str(code)}")
    if nccl_lib.entry_point("ncclMemAlloc") is None:
        return f"register={mode}: this libnccl has no ncclMemAlloc"
    return None


class Registration:
    """The ncclMemAlloc'ed buffers of one Case and their registrations, released by :meth:`close`."""

    def __init__(self, mode: str, comm: nccl_lib.Comm, device: str):
        why = unsupported(mode)
        if why:
            raise SkipCase(why)
        self.mode, self.comm, self.device = mode, comm, device
        self.pointers: list[int] = []
        self.handles: list[int] = []

    def alloc_bytes(self, nbytes: int):
        """A uint8 tensor over ``nbytes`` of ncclMemAlloc memory (freed by close)."""
        import torch

        ptr = nccl_lib.mem_alloc(nbytes)
        self.pointers.append(ptr)
        return torch.as_tensor(_CudaBytes(ptr, nbytes), device=self.device)

    def register(self, allocations) -> None:
        """Register every allocation (whole); a refusal releases everything and skips the Case."""
        fn = _REGISTER[self.mode](nccl_lib.entry_point(ENTRY_POINTS[self.mode][0]))
        for buf in allocations:
            handle = ctypes.c_void_p()
            nbytes = buf.numel() * buf.element_size()
            args = (self.comm.handle, buf.data_ptr(), nbytes, ctypes.byref(handle))
            rc = fn(*args, nccl_lib.NCCL_WIN_COLL_SYMMETRIC) if self.mode == "window" else fn(*args)
            if rc != 0 or not handle.value:
                why = self._reason(rc)
                self.close()
                raise SkipCase(f"NCCL refused register={self.mode} ({ENTRY_POINTS[self.mode][0]} of "
                               f"{nbytes} B): {why}")
            self.handles.append(handle.value)

    def _reason(self, rc: int) -> str:
        lib = nccl_lib.library()
        if rc == 0:
            return ("it returned no handle (NCCL_LOCAL_REGISTER=0 turns user registration off)"
                    if self.mode == "user" else "it returned no window")
        last = lib.ncclGetLastError(self.comm.handle).decode(errors="replace")
        return lib.ncclGetErrorString(rc).decode(errors="replace") + (f" ({last})" if last else "")

    def close(self) -> None:
        """Deregister, then free (the tensors over this memory must not be used afterwards)."""
        dereg = _DEREGISTER(nccl_lib.entry_point(ENTRY_POINTS[self.mode][1]))
        for handle in reversed(self.handles):
            dereg(self.comm.handle, handle)
        self.handles = []
        for ptr in self.pointers:
            nccl_lib.mem_free(ptr)
        self.pointers = []
