"""Cheap GPU counting for planning, without importing torch or CUDA libraries."""
from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache


@lru_cache(maxsize=1)
def gpu_count() -> int:
    """GPUs visible to this process (CUDA_VISIBLE_DEVICES respected); 0 without a GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [x for x in visible.split(",") if x.strip() and x.strip() != "-1"]
        if not ids:
            return 0
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    n = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return min(n, len(ids)) if visible is not None else n
