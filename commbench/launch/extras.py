"""Which optional installs the run path needs, said before anything starts (exit 2).

`pip install -e .` in a checkout is enough for report, compare, accept and import; running suites
needs the `mpi` extra (mpi4py and an MPI) and, for every family but the harness, the `torch` extra
(pyproject.toml). A missing one is named with the command that installs it."""
from __future__ import annotations

from importlib.util import find_spec

from ..errors import CommbenchError

TORCH_CPU = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def missing(module: str) -> bool:
    try:
        return find_spec(module) is None
    except (ImportError, ValueError):
        return True


def require_run_extras() -> None:
    """mpi4py: every run starts or joins MPI ranks."""
    if missing("mpi4py"):
        raise CommbenchError("running a suite needs MPI, and mpi4py is not installed: "
                             "pip install -e '.[mpi]' in the commbench checkout (mpi4py and Open MPI), "
                             "or mpi4py built on your site's MPI (README: Installing on a GPU cluster). "
                             "report, compare, accept and import work without it.")


def require_torch_for(suite) -> None:
    """torch, when any Case of the suite belongs to a family that needs it."""
    from ..families import get_family

    if not missing("torch"):
        return
    families = sorted({c.family for c in suite.cases if get_family(c.family).needs_torch})
    if families:
        raise CommbenchError(f"suite {suite.path} runs families that need torch ({', '.join(families)}), "
                             f"and torch is not installed: pip install -e '.[torch]' in the commbench checkout "
                             f"(on a machine without a GPU the CPU build avoids a multi-GB download: {TORCH_CPU}).")
