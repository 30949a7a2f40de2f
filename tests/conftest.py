import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def has_mpiexec() -> bool:
    try:
        from commbench.launch.mpiexec import find_mpiexec

        find_mpiexec()
        return True
    except Exception:  # noqa: BLE001 - any reason (no mpi4py, no mpiexec) means: skip the MPI tests
        return False


def has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


needs_mpi = pytest.mark.skipif(not has_mpiexec(), reason="no mpiexec/mpi4py on this machine")
needs_gpu = pytest.mark.skipif(not has_cuda(), reason="no CUDA GPU on this machine")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc"),
                                reason="nvcc not installed")

