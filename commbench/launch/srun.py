"""srun's `--mpi` plugin for the MPI that mpi4py uses, and the srun options Slurm no longer
inherits from the allocation.

srun starts tasks; the MPI library inside them finds its peers only through a PMI that both
sides speak. A site's `MpiDefault=none` (Debian's default) gives every task a world of 1. So:

- `SLURM_MPI_TYPE` set by the user or site wins (srun reads it too);
- else the plugins srun offers (`srun --mpi=list`) that this MPI speaks (Open MPI 5: PMIx only;
  Open MPI 4, MPICH, Intel MPI: PMIx or PMI-2), each tried once with a two-task probe that
  checks the world size, because a listed plugin may not load (Debian ships mpi_pmix without
  the libpmix.so it opens);
- PMIx only where the PMIx inside the MPI and the one Slurm's plugin serves have the same major
  version: a PMIx 5 client (Open MPI 5's own) under Slurm's PMIx 4 server (Debian 12's
  mpi_pmix_v4) passes the probe, then starts steps that now and then crash or hang in MPI_Init;
  the MPI's own launcher is then the deterministic choice;
- else no srun plugin works with this MPI, and commbench starts ranks with the MPI's own
  launcher (mpiexec), which uses the allocation by itself.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import lru_cache

PROBE_TIMEOUT_S = 60.0
# The PMIx library inside mpi4py's MPI (loaded with it, not initialised): its version string.
PMIX_CODE = ("import ctypes, mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI\n"
             "libs = [l.split()[-1] for l in open('/proc/self/maps') if 'libpmix' in l]\n"
             "if libs:\n    lib = ctypes.CDLL(libs[0]); lib.PMIx_Get_version.restype = ctypes.c_char_p\n"
             "    print(lib.PMIx_Get_version().decode())")
PROBE = "from mpi4py import MPI; print('commbench-probe', MPI.COMM_WORLD.Get_size(), flush=True)"


def srun_plugins() -> list[str]:
    """The MPI plugin types `srun --mpi=list` names ([] when srun cannot say)."""
    try:
        out = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    names = []
    for line in (out.stdout + out.stderr).splitlines():
        word = line.strip()
        if word.startswith("srun:"):          # older Slurm: "srun: pmi2" on stderr
            word = word[len("srun:"):].strip()
        if word and " " not in word:          # headers ("MPI plugin types are...") have spaces
            names.append(word)
        elif "versions available:" in word:   # "specific pmix plugin versions available: pmix_v4"
            names += [w.strip() for w in word.split(":", 1)[1].replace(",", " ").split() if w.strip()]
    return names


@lru_cache(maxsize=1)
def mpi_library() -> str:
    """The first line of MPI_Get_library_version of mpi4py's MPI (without initialising it here)."""
    loaded = sys.modules.get("mpi4py.MPI")
    if loaded is not None:   # a rank: MPI is up already
        return loaded.Get_library_version().replace("\0", "").strip().splitlines()[0]
    code = ("import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
            "print(MPI.Get_library_version().replace(chr(0), '').strip().splitlines()[0])")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


@lru_cache(maxsize=1)
def mpi_pmix_version() -> str:
    """The version string of the PMIx that mpi4py's MPI carries ("" when none or unknown)."""
    try:
        out = subprocess.run([sys.executable, "-c", PMIX_CODE], capture_output=True, text=True, timeout=60,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def _major(version: str) -> int | None:
    for word in version.replace("v", " ").split():
        head = word.split(".")[0]
        if head.isdigit() and "." in word:
            return int(head)
    return None


def slurm_pmix_major(offered: list[str]) -> int | None:
    """The PMIx major version Slurm's plugin serves, from its names (`pmix_v4`); None when unnamed."""
    majors = [int(p[len("pmix_v"):]) for p in offered if p.startswith("pmix_v") and p[len("pmix_v"):].isdigit()]
    return max(majors) if majors else None


def pmix_mismatch(offered: list[str], client_version: str) -> str:
    """Why srun's PMIx must not start this MPI ("" when the majors agree or one is unknown)."""
    server, client = slurm_pmix_major(offered), _major(client_version)
    if server is None or client is None or server == client:
        return ""
    return (f"srun --mpi=pmix: Slurm serves PMIx {server}, the MPI's ranks speak {client_version}; "
            f"such steps crash or hang in MPI_Init now and then")


def pmi_preference(library: str) -> list[str]:
    """The PMI plugins an MPI library speaks, best first."""
    lib = library.lower()
    if "open mpi" in lib:
        major = lib.split("open mpi v", 1)[-1][:1]
        return ["pmix"] if major.isdigit() and int(major) >= 5 else ["pmix", "pmi2"]
    if "intel" in lib:
        return ["pmi2", "pmix"]
    return ["pmix", "pmi2"]   # MPICH, MVAPICH and others: PMIx when built with it, else PMI-2


def probe(plugin: str, tasks: int = 2) -> tuple[bool, str]:
    """Start ``tasks`` tasks with `srun --mpi=plugin` and check they see one world of that size."""
    argv = ["srun", f"--mpi={plugin}", f"--ntasks={tasks}", "--kill-on-bad-exit=1", "--export=ALL",
            *cpus_per_task_args(), sys.executable, "-c", PROBE]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return False, f"srun --mpi={plugin}: no answer in {PROBE_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return False, f"srun --mpi={plugin}: {exc}"
    sizes = [ln.split()[1] for ln in out.stdout.splitlines() if ln.startswith("commbench-probe ")]
    if out.returncode == 0 and sizes == [str(tasks)] * tasks:
        return True, f"srun --mpi={plugin}: {tasks} tasks see one world of {tasks}"
    why = (out.stderr.strip().splitlines() or [f"world sizes {sizes}"])[-1]
    return False, f"srun --mpi={plugin}: {why}"


@lru_cache(maxsize=1)
def choose_mpi_plugin() -> tuple[str | None, str]:
    """(plugin for `srun --mpi`, or None when srun cannot start this MPI's ranks; the reason)."""
    forced = os.environ.get("SLURM_MPI_TYPE", "").strip()
    if forced:
        return forced, "SLURM_MPI_TYPE"
    if shutil.which("srun") is None:
        return None, "no srun"
    library = mpi_library()
    offered = srun_plugins()
    candidates = [p for p in pmi_preference(library) if p in offered]
    tried = []
    mismatch = pmix_mismatch(offered, mpi_pmix_version()) if "pmix" in candidates else ""
    if mismatch:
        candidates.remove("pmix")
        tried.append(mismatch)
    tasks = allocation_tasks()
    if candidates and tasks < 2:
        return candidates[0], f"{library or 'MPI'} speaks {candidates[0]}; one task needs no probe"
    for plugin in candidates:
        ok, what = probe(plugin)
        if ok:
            return plugin, what
        tried.append(what)
    return None, (f"no srun MPI plugin starts {library or 'this MPI'} here (srun offers "
                  f"{', '.join(offered) or 'none'}; {library or 'the MPI'} speaks "
                  f"{', '.join(pmi_preference(library))}" + (f"; {'; '.join(tried)}" if tried else "") + ")")


def allocation_tasks() -> int:
    from ..world import slurm_allocation_tasks

    return slurm_allocation_tasks()[0]


def cpus_per_task_args() -> list[str]:
    """`--cpus-per-task` of the allocation: srun does not inherit it since Slurm 22.05."""
    cpus = os.environ.get("SLURM_CPUS_PER_TASK", "").strip()
    return [f"--cpus-per-task={cpus}"] if cpus.isdigit() and int(cpus) > 0 else []
