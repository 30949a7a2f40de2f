"""Shared test helpers and the two test targets.

`make test` runs every test not marked `mpi`, `slurm`, `cluster`, `browser`, `gpu`, `slow` or
`install` (real launches, a real Slurm, network namespaces, a browser, a GPU, NVSHMEM links, a venv);
`make test-all` runs the rest. A test that starts a real MPI launch must be marked `mpi` (use
`@needs_mpi`): the launches go through a recording mpiexec (below), and an unmarked test that
starts one fails, naming the marker, so `make test` stays free of MPI start-up costs."""
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Marks a test that starts real MPI ranks; collection adds the skip where no mpiexec is found.
needs_mpi = pytest.mark.mpi
_MPI_LOG: Path | None = None


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


needs_gpu = pytest.mark.skipif(not has_cuda(), reason="no CUDA GPU on this machine")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc"),
                                reason="nvcc not installed")


def _record_mpi_launches() -> None:
    """COMMBENCH_MPIEXEC -> a script that notes each launch (not `--version` probes) in a log and
    execs the real mpiexec (same process, same arguments). Left alone where the user set
    COMMBENCH_MPIEXEC or no mpiexec is found."""
    global _MPI_LOG
    if os.environ.get("COMMBENCH_MPIEXEC") or not has_mpiexec():
        return
    from commbench.sysinfo.mpi import find_mpiexec

    real = find_mpiexec()
    folder = Path(tempfile.mkdtemp(prefix="cb-test-mpiexec-"))
    _MPI_LOG = folder / "launches.log"
    _MPI_LOG.touch()
    script = folder / "mpiexec"
    script.write_text(f'#!/bin/sh\ncase "$1" in --version) ;; *) echo launch >> "{_MPI_LOG}";; esac\n'
                      f'exec "{real}" "$@"\n')
    script.chmod(0o755)
    os.environ["COMMBENCH_MPIEXEC"] = str(script)
    find_mpiexec.cache_clear()


def pytest_configure(config):
    _record_mpi_launches()


def pytest_unconfigure(config):
    if _MPI_LOG is not None:
        shutil.rmtree(_MPI_LOG.parent, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Tests marked `mpi` skip, saying why, where no mpiexec/mpi4py is found."""
    if has_mpiexec():
        return
    skip = pytest.mark.skip(reason="no mpiexec/mpi4py on this machine")
    for item in items:
        if item.get_closest_marker("mpi"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _mpi_launches_are_marked(request):
    """A test that starts a real MPI launch without the `mpi` marker fails after it ran."""
    before = _MPI_LOG.stat().st_size if _MPI_LOG else 0
    yield
    if _MPI_LOG is None or request.node.get_closest_marker("mpi"):
        return
    if any(request.node.get_closest_marker(m) for m in ("slurm", "cluster", "gpu", "install")):
        return
    if _MPI_LOG.stat().st_size > before:
        pytest.fail("this test started real MPI ranks (mpiexec) but is not marked `mpi`: decorate it "
                    "with @needs_mpi (tests/conftest.py) so that `make test` leaves it to `make test-all`, "
                    "or test its logic without a launch", pytrace=False)
