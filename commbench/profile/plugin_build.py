"""Build kernels/nccl_profiler/ into libnccl-profiler-commbench.so (see profile.native).

The plugin is plain C++: it declares NCCL's profiler ABI itself (profiler_abi.h)
and needs no CUDA or NCCL headers, so any host C++ compiler builds it.
"""
from __future__ import annotations

from pathlib import Path

from ..jit import kernels_dir
from .native import build_library

FOLDER = "nccl_profiler"
LIB_NAME = "libnccl-profiler-commbench.so"


def source_dir() -> Path:
    return kernels_dir() / FOLDER


def build() -> Path:
    """Compile the plugin if needed; return the library's path (NCCL_PROFILER_PLUGIN takes it)."""
    return build_library(FOLDER, LIB_NAME, libs=("-lpthread",))
