"""NVTX ranges in domain "commbench": one around each Case, one around each timed batch.

Always on and cheap: with no NVTX tool attached (Nsight Systems sets
``NVTX_INJECTION64_PATH`` in the processes it profiles) a range is one dict
lookup and nothing else. With a tool attached, the ranges go through a small
C++ shim built on NVTX v3 (kernels/nvtx/, header-only NVTX from the CUDA
toolkit), so they land in their own domain with the Case's size as payload;
if the shim cannot be built, torch's NVTX binding (default domain, names
prefixed "commbench:") is used; without either, nothing happens.

    nsys profile -t cuda,nvtx,nccl -o prof commbench run suite.yaml
"""
from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Callable, NamedTuple

DOMAIN = "commbench"
TOOL_ENV = "NVTX_INJECTION64_PATH"
FORCE_ENV = "COMMBENCH_NVTX"          # "1": load the shim even without a tool (tests); "0": never
CASE_ARGB = 0xFF4C72B0
BATCH_ARGB = 0xFFDD8452


class _Ranges(NamedTuple):
    push: Callable[[str, int, int], None]
    pop: Callable[[], None]
    how: str   # "domain" (our shim) or "torch" (default domain)


def cuda_include_dirs() -> list[Path]:
    """CUDA include folders that hold nvtx3/ (CUDA_HOME, beside nvcc, /usr/local/cuda)."""
    found = []
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    try:
        from ..jit import find_nvcc

        homes.append(str(Path(find_nvcc()).resolve().parent.parent))
    except Exception:  # noqa: BLE001 - no nvcc: try the usual place
        pass
    homes.append("/usr/local/cuda")
    for home in homes:
        if home and (Path(home) / "include" / "nvtx3" / "nvToolsExt.h").exists():
            found.append(Path(home) / "include")
    return found[:1]


def _shim() -> _Ranges:
    from .native import build_library

    incs = cuda_include_dirs()
    if not incs:
        raise OSError("no CUDA include folder with nvtx3/")
    lib = ctypes.CDLL(str(build_library("nvtx", "libcommbench-nvtx.so", includes=incs, libs=("-ldl",))))
    push, pop = lib.commbench_nvtx_push, lib.commbench_nvtx_pop
    push.argtypes, push.restype = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint32], ctypes.c_int
    pop.argtypes, pop.restype = [], ctypes.c_int
    return _Ranges(lambda msg, payload, argb: push(msg.encode(errors="replace"), payload, argb), pop, "domain")


def _torch() -> _Ranges | None:
    import sys

    torch = sys.modules.get("torch")   # never import torch just for this
    if torch is None or not torch.cuda.is_available():
        return None
    nvtx = torch.cuda.nvtx
    return _Ranges(lambda msg, payload, argb: nvtx.range_push(f"{DOMAIN}: {msg}"), nvtx.range_pop, "torch")


@lru_cache(maxsize=1)
def ranges() -> _Ranges | None:
    """The range functions for this process, or None when no tool listens (decided once)."""
    force = os.environ.get(FORCE_ENV, "")
    if force == "0" or not (os.environ.get(TOOL_ENV) or force == "1"):
        return None
    try:
        return _shim()
    except Exception:  # noqa: BLE001 - a missing compiler or header must never stop a run
        return _torch()


@contextmanager
def nvtx_range(message: str, payload: int = 0, argb: int = CASE_ARGB):
    """A range in domain "commbench" (a no-op without a tool)."""
    r = ranges()
    if r is None:
        yield
        return
    r.push(message, int(payload), argb)
    try:
        yield
    finally:
        r.pop()


def case_message(case) -> str:
    """Name of a Case's range: suite, bench, op, backend, size and case_id (what nsys shows)."""
    from ..units import format_size

    return (f"{case.suite}/{case.bench} {case.op} {case.backend} {format_size(case.size_bytes)} "
            f"case_id={case.case_id}")


def case_range(case):
    return nvtx_range(case_message(case), case.size_bytes, CASE_ARGB)


def batch_range(case, iters: int):
    """Range around one timed batch of ``iters`` ops of a Case."""
    return nvtx_range(f"timed x{iters} {case_message(case)}", case.size_bytes, BATCH_ARGB)
