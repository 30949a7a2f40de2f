"""Cheap GPU counting for planning, without importing torch or CUDA libraries."""
from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def gpu_count() -> int:
    """GPUs visible to this process (CUDA_VISIBLE_DEVICES respected); 0 without a GPU. Read through
    NVML (or the CUDA driver where NVML is missing: sysinfo/nvml_devices.py), never nvidia-smi text."""
    from .nvml_devices import read_gpus

    return read_gpus().count
