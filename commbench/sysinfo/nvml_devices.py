"""The GPUs this process can use, as the preflight needs them: how many, their names, total and
free memory. Read from NVML, never from `nvidia-smi` text, in this order:

1. ``pynvml`` (the nvidia-ml-py package) when it imports;
2. NVML itself through ctypes (``libnvidia-ml.so.1``, which every NVIDIA driver installs) when
   pynvml is not installed: the same calls, so the same answer;
3. the CUDA driver (``libcuda.so.1``: cuDeviceGetCount, cuDeviceGetName, cuDeviceTotalMem) when
   NVML cannot be loaded: count, names and total memory, free memory unknown (it would need a
   CUDA context in this process). torch is never imported here: it takes seconds, and the
   preflight must answer within one.

NVML lists every GPU of the node; ``CUDA_VISIBLE_DEVICES`` is applied as CUDA applies it (indices
or ``GPU-`` UUID prefixes, in the order given, up to the first entry that names no GPU), so the
count is what the ranks will see (indices in NVML's order, the PCI bus order: on a node of one GPU
model that is the same answer as CUDA's; MIG instances are left to the CUDA driver). An unreadable
machine is not an error: ``GpusSeen.problem`` says why nothing was read, and ``gpus`` is empty.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any, Mapping

NAME_CHARS = 96


@dataclass(frozen=True)
class GpuSeen:
    """One GPU as the ranks will see it: its CUDA-visible index, name and memory (None: unknown)."""

    index: int
    name: str
    total_bytes: int | None
    free_bytes: int | None = None
    uuid: str = ""


@dataclass(frozen=True)
class GpusSeen:
    """The GPUs of this process and where the answer came from (``source``: pynvml, nvml,
    cuda-driver or none); ``problem`` says why nothing could be read, "" otherwise."""

    gpus: tuple[GpuSeen, ...]
    source: str
    problem: str = ""

    @property
    def count(self) -> int:
        return len(self.gpus)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _CtypesNvml:
    """The five NVML calls this module uses, over libnvidia-ml through ctypes, spelled as pynvml
    spells them, so one reader serves both."""

    class _Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    def __init__(self, lib: Any):
        self._lib = lib

    def _call(self, name: str, *args) -> None:
        rc = getattr(self._lib, name)(*args)
        if rc != 0:
            raise OSError(f"{name} returned NVML error {rc}")

    def nvmlInit(self) -> None:
        self._call("nvmlInit_v2")

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:
        n = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(n))
        return n.value

    def nvmlDeviceGetHandleByIndex(self, index: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        return handle

    def nvmlDeviceGetName(self, handle) -> str:
        buf = ctypes.create_string_buffer(NAME_CHARS)
        self._call("nvmlDeviceGetName", handle, buf, ctypes.c_uint(NAME_CHARS))
        return buf.value.decode(errors="replace")

    def nvmlDeviceGetUUID(self, handle) -> str:
        buf = ctypes.create_string_buffer(NAME_CHARS)
        self._call("nvmlDeviceGetUUID", handle, buf, ctypes.c_uint(NAME_CHARS))
        return buf.value.decode(errors="replace")

    def nvmlDeviceGetMemoryInfo(self, handle) -> "_CtypesNvml._Memory":
        mem = self._Memory()
        self._call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(mem))
        return mem


def _nvml_binding() -> tuple[Any, str] | tuple[None, str]:
    """(binding, source) for NVML: pynvml, else libnvidia-ml through ctypes; (None, why) without."""
    try:
        import pynvml   # nvidia-ml-py
        return pynvml, "pynvml"
    except ImportError:
        pass
    try:
        return _CtypesNvml(ctypes.CDLL("libnvidia-ml.so.1")), "nvml"
    except OSError as exc:
        return None, f"NVML did not load (no pynvml, and libnvidia-ml.so.1: {exc})"


def nvml_gpus(nvml: Any) -> list[GpuSeen]:
    """Every GPU NVML lists (node order, CUDA_VISIBLE_DEVICES not applied). Raises what the
    binding raises when NVML cannot start (no driver); one GPU's unreadable memory is None."""
    nvml.nvmlInit()
    try:
        out = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            name = _text(nvml.nvmlDeviceGetName(handle))
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except Exception:  # noqa: BLE001 - a UUID only maps CUDA_VISIBLE_DEVICES; unknown is fine
                uuid = ""
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                total, free = int(mem.total), int(mem.free)
            except Exception:  # noqa: BLE001 - memory unknown, the GPU is still there
                total = free = None
            out.append(GpuSeen(index=i, name=name, total_bytes=total, free_bytes=free, uuid=uuid))
        return out
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - nothing to do about a failed shutdown
            pass


def apply_visible(gpus: list[GpuSeen], visible: str | None) -> list[GpuSeen]:
    """The GPUs CUDA shows under ``CUDA_VISIBLE_DEVICES=visible`` (None: all), renumbered from 0
    as CUDA numbers them. Entries are indices or UUID prefixes (``GPU-...``); as in CUDA, an
    entry that names no GPU (or one named twice) ends the list there."""
    if visible is None:
        return list(gpus)
    out: list[GpuSeen] = []
    for raw in visible.split(","):
        entry = raw.strip()
        match = None
        if entry.isdigit():
            match = next((g for g in gpus if g.index == int(entry)), None)
        elif entry.upper().startswith("GPU-"):
            hits = [g for g in gpus if g.uuid and g.uuid.upper().startswith(entry.upper())]
            match = hits[0] if len(hits) == 1 else None
        if match is None or match.index in {o.index for o in out}:
            break
        out.append(match)
    return [GpuSeen(index=i, name=g.name, total_bytes=g.total_bytes, free_bytes=g.free_bytes, uuid=g.uuid)
            for i, g in enumerate(out)]


def driver_gpus(lib: Any) -> list[GpuSeen]:
    """Count, names and total memory from the CUDA driver (it applies CUDA_VISIBLE_DEVICES
    itself); free memory None. Raises OSError when the driver cannot start."""
    if lib.cuInit(0) != 0:
        raise OSError("cuInit failed (no usable GPU or driver)")
    count = ctypes.c_int()
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        raise OSError("cuDeviceGetCount failed")
    out = []
    for i in range(count.value):
        dev, total = ctypes.c_int(), ctypes.c_size_t()
        buf = ctypes.create_string_buffer(NAME_CHARS)
        if lib.cuDeviceGet(ctypes.byref(dev), i) != 0:
            raise OSError(f"cuDeviceGet({i}) failed")
        name = buf.value.decode(errors="replace") if lib.cuDeviceGetName(buf, NAME_CHARS, dev) == 0 else "GPU"
        mem = int(total.value) if lib.cuDeviceTotalMem_v2(ctypes.byref(total), dev) == 0 else None
        out.append(GpuSeen(index=i, name=name, total_bytes=mem))
    return out


def read_gpus(env: Mapping[str, str] | None = None) -> GpusSeen:
    """The GPUs this process may use (see the module's docstring for the sources, in order)."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    nvml, source = _nvml_binding()
    problems = []
    if nvml is not None and visible is not None and "MIG-" in visible.upper():
        nvml, source = None, "NVML not used: CUDA_VISIBLE_DEVICES names MIG instances, which the CUDA driver maps"
    if nvml is not None:
        try:
            return GpusSeen(tuple(apply_visible(nvml_gpus(nvml), visible)), source)
        except Exception as exc:  # noqa: BLE001 - NVML present but no driver: try CUDA, then say why
            problems.append(f"{source}: {exc}")
    else:
        problems.append(source)
    try:
        return GpusSeen(tuple(driver_gpus(ctypes.CDLL("libcuda.so.1"))), "cuda-driver")
    except OSError as exc:
        problems.append(f"CUDA driver: {exc}")
    return GpusSeen((), "none", "; ".join(problems))
