"""NVSHMEM start-up: find the install, initialise once per launch over MPI, share the instance.

``ensure(ctx)`` builds ``kernels/nvshmem_boot.cu``, has rank 0 create a unique
id, broadcasts it over mpi4py (any MPI works) and initialises every rank with
it. The handle lives in ``ctx.cache`` and NVSHMEM is finalised through
``ctx.on_close``. ``handle.load(name)`` builds another ``kernels/<name>.cu``
against the same NVSHMEM and registers its device state with this instance
(the library must export ``<attach_symbol>(int device)``; see
``kernels/nvshmem_common.cuh``). The install is the ``nvidia-nvshmem-cu13`` (or
``-cu12``) wheel's ``nvidia/nvshmem`` folder, or ``NVSHMEM_HOME`` when set.
Nothing here imports GPU packages at import time.
"""
from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Mapping

from ..errors import CommbenchError, SkipCase
from .. import safety
from .nvshmem_install import (NvshmemInstall, NvshmemNotFound, compile_flags, find_install,  # noqa: F401
                              link_args, metadata)   # callers import the install facts from here too

CACHE_KEY = "nvshmem"
STATUS_NAMES = {0: "not_initialized", 1: "bootstrapped", 2: "initialized", 3: "limited_mpg", 4: "full_mpg"}
# Read by NVSHMEM (and the NCCL inside it) at init: it must never come up able to use multicast.
MULTICAST_OFF = ("NVSHMEM_DISABLE_NVLS", "NCCL_NVLS_ENABLE")


class NvshmemError(CommbenchError):
    """An NVSHMEM call returned an error after initialisation."""


def transport_label(env: Mapping[str, str], all_p2p: bool) -> str:
    """Name of the path data took: p2p (loads/stores over NVLink/PCIe) or the remote transport."""
    if all_p2p:
        return "p2p"
    if env.get("NVSHMEM_IB_ENABLE_IBGDA", "0").strip().lower() in ("1", "true", "yes", "y"):
        return "ibgda"
    return env.get("NVSHMEM_REMOTE_TRANSPORT", "ibrc").strip().lower() or "ibrc"


def multicast_refusal(env: Mapping[str, str] | None = None) -> str | None:
    """Why NVSHMEM may not start here: a multicast kill switch it reads at init is not held.

    Every launch sets them (no NVSHMEM user opts in to multicast), as does
    ``commbench.measure.standalone.open_rank``; start-up never sets them itself.
    """
    held = safety.active_kill_switches(env)
    missing = [f"{k}={safety.KILL_SWITCHES[k]}" for k in MULTICAST_OFF if k not in held]
    if not missing:
        return None
    return (f"NVSHMEM starts only with multicast off, and this rank's environment lacks {', '.join(missing)} "
            f"(every commbench launch sets it; run through `commbench run` or measure.standalone.open_rank)")


@contextmanager
def captured_output():
    """Collect what C code prints on fd 1 and 2 (NVSHMEM's own messages), then echo it.

    Yields a list that holds the captured text once the block ends.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    holder: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield holder
        finally:
            try:
                ctypes.CDLL(None).fflush(None)
            except (OSError, AttributeError):
                pass
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            holder.append(text)
            if text:
                sys.stderr.write(text)
                sys.stderr.flush()


def _reason_from(text: str, status: int) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    tail = " | ".join(lines[-4:]) if lines else "no message"
    return f"NVSHMEM could not initialise (status {status}): {tail}"


@dataclass
class NvshmemHandle:
    """One initialised NVSHMEM instance for this rank (per launch)."""

    lib: ctypes.CDLL
    install: NvshmemInstall
    device_index: int
    pe: int
    n_pes: int
    status: int
    name: str
    libs: dict = field(default_factory=dict)
    buffers: dict = field(default_factory=dict)  # name -> (ptr, size_bytes)

    @property
    def limited_mpg(self) -> bool:
        return self.status == 3

    @property
    def status_name(self) -> str:
        return STATUS_NAMES.get(self.status, str(self.status))

    def load(self, name: str, attach_symbol: str) -> ctypes.CDLL:
        """Build kernels/<name>.cu against this NVSHMEM and register its device state."""
        if name in self.libs:
            return self.libs[name]
        lib = load_library(name, self.install)
        attach = getattr(lib, attach_symbol)
        attach.argtypes = [ctypes.c_int]
        rc = attach(self.device_index)
        if rc != 0:
            raise NvshmemError(f"{name}: {attach_symbol} failed with status {rc}")
        self.libs[name] = lib
        return lib

    def buffer(self, name: str, size_bytes: int) -> int:
        """Symmetric buffer of at least size_bytes, reused across Cases (grow only).

        Every PE must ask for the same names and sizes in the same order: the
        allocation is collective.
        """
        size_bytes = max(int(size_bytes), 256)
        ptr, have = self.buffers.get(name, (0, 0))
        if have >= size_bytes:
            return ptr
        if ptr:
            self.lib.cb_boot_free(ctypes.c_void_p(ptr))
        new = self.lib.cb_boot_malloc(ctypes.c_size_t(size_bytes))
        if not new:
            self.buffers.pop(name, None)
            raise NvshmemError(f"nvshmem_malloc({size_bytes}) failed: raise NVSHMEM_SYMMETRIC_SIZE")
        self.buffers[name] = (new, size_bytes)
        return new

    def is_p2p(self, ptr: int, pe: int) -> bool:
        return bool(self.lib.cb_boot_is_p2p(ctypes.c_void_p(ptr), pe))

    def barrier_all(self) -> None:
        self.lib.cb_boot_barrier_all()

    def finalize(self) -> None:
        for ptr, _ in self.buffers.values():
            self.lib.cb_boot_free(ctypes.c_void_p(ptr))
        self.buffers.clear()
        self.lib.cb_boot_finalize()


def load_library(name: str, install: NvshmemInstall | None = None) -> ctypes.CDLL:
    """Build (cached) and load kernels/<name>.cu with NVSHMEM's flags and libraries."""
    from .. import jit

    inst = install or find_install()
    return jit.load(name, flags=compile_flags(inst), libs=link_args(inst))


def _declare(lib: ctypes.CDLL) -> None:
    vp, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    lib.cb_boot_get_uid.argtypes = [vp, i]
    lib.cb_boot_init.argtypes = [vp, i, i]
    lib.cb_boot_set_device.argtypes = [i]
    lib.cb_boot_malloc.argtypes = [sz]
    lib.cb_boot_malloc.restype = vp
    lib.cb_boot_free.argtypes = [vp]
    lib.cb_boot_is_p2p.argtypes = [vp, i]
    lib.cb_boot_name.argtypes = [ctypes.c_char_p, i]
    lib.cb_boot_barrier_all_on_stream.argtypes = [vp]


def ensure(ctx) -> NvshmemHandle:
    """The launch's NVSHMEM handle, initialising NVSHMEM on first use (collective over ranks).

    Raises SkipCase with NVSHMEM's own message when it cannot come up (for
    example a remote transport without an HCA); later Cases of the same launch
    get the same reason without a second attempt.
    """
    cached = ctx.cache.get(CACHE_KEY)
    if isinstance(cached, NvshmemHandle):
        return cached
    if isinstance(cached, SkipCase):
        raise SkipCase(str(cached))
    inst = _installed_for(ctx)
    import torch

    device_index = int(str(ctx.device).split(":")[1]) if ":" in str(ctx.device) else 0
    torch.cuda.set_device(device_index)
    lib = load_library("nvshmem_boot", inst)
    _declare(lib)
    lib.cb_boot_set_device(device_index)
    reason = _initialise(lib, ctx.world)
    if reason is not None:
        ctx.cache[CACHE_KEY] = SkipCase(reason)
        raise SkipCase(reason)
    name = ctypes.create_string_buffer(256)
    lib.cb_boot_name(name, 256)
    handle = NvshmemHandle(lib=lib, install=inst, device_index=device_index, pe=lib.cb_boot_my_pe(),
                           n_pes=lib.cb_boot_n_pes(), status=lib.cb_boot_status(),
                           name=name.value.decode(errors="replace"))
    ctx.cache[CACHE_KEY] = handle
    ctx.on_close(handle.finalize)
    return handle


def _installed_for(ctx):
    """The NVSHMEM install, once this rank may start NVSHMEM at all (a GPU, multicast held off)."""
    if not str(ctx.device).startswith("cuda"):
        raise SkipCase("NVSHMEM needs a CUDA GPU on every rank")
    safety.before_communicator("NVSHMEM")   # the C environment NVSHMEM reads at init
    refusal = multicast_refusal()
    if refusal:
        raise SkipCase(refusal)
    try:
        return find_install()
    except NvshmemNotFound as exc:
        raise SkipCase(str(exc)) from exc


def _initialise(lib, world) -> str | None:
    """NVSHMEM started on every rank from rank 0's unique id; None, or why it did not start (the
    same sentence on every rank)."""
    uid_size = lib.cb_boot_uid_size()
    uid = ctypes.create_string_buffer(uid_size)
    rc = lib.cb_boot_get_uid(uid, uid_size) if world.rank == 0 else 0
    uid_bytes = world.bcast(uid.raw if world.rank == 0 else None, root=0)
    rc = world.bcast(rc, root=0)
    if rc != 0:
        return f"nvshmemx_get_uniqueid failed with status {rc}"
    uid = ctypes.create_string_buffer(uid_bytes, uid_size)
    with captured_output() as text:
        status = lib.cb_boot_init(uid, world.rank, world.size)
    statuses = world.allgather(status)
    if any(statuses):
        bad = next(r for r, s in enumerate(statuses) if s)
        return _reason_from(text[0], statuses[bad]) if status else f"rank {bad}: NVSHMEM init failed"
    # NVSHMEM can return success yet stop after the bootstrap (for example
    # "Unable to initialize any transports" with P2P disabled and no HCA).
    if not all(world.allgather(lib.cb_boot_status() >= 2)):
        return _reason_from(text[0], lib.cb_boot_status()).replace("could not initialise",
                                                                    "stopped after the bootstrap")
    return None
