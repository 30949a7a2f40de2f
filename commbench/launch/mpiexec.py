"""The argv that starts a launch's ranks: srun inside a Slurm allocation (with the `--mpi` plugin
this MPI speaks and the allocation's `--cpus-per-task`, see launch/srun.py), else the mpiexec that
belongs to the installed mpi4py (found by sysinfo/mpi.py; also inside an allocation whose srun
cannot start this MPI). Argv lists only, never a shell string."""
from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache

from ..sysinfo.mpi import find_mpiexec
from ..world import inside_slurm_allocation


@lru_cache(maxsize=4)
def _is_open_mpi(mpiexec: str) -> bool:
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    text = out.stdout + out.stderr
    return "Open MPI" in text or "OpenRTE" in text


def launcher_argv(ranks: int, ranks_per_node: int, env_keys: list[str],
                  hosts: tuple[str, ...] = ()) -> list[str]:
    """argv prefix that starts ``ranks`` processes, one per GPU slot (on ``hosts`` when named)."""
    if inside_slurm_allocation() and shutil.which("srun"):
        from .srun import choose_mpi_plugin, cpus_per_task_args

        plugin, _why = choose_mpi_plugin()
        if plugin is not None:   # else srun cannot start this MPI: its own mpiexec uses the allocation
            argv = ["srun", f"--ntasks={ranks}", f"--ntasks-per-node={ranks_per_node}",
                    "--kill-on-bad-exit=1", "--export=ALL", f"--mpi={plugin}", *cpus_per_task_args()]
            if hosts:
                argv += [f"--nodes={len(hosts)}", f"--nodelist={','.join(hosts)}"]
            return argv
    mpiexec = find_mpiexec()
    argv = [mpiexec, "-n", str(ranks)]
    if hosts and not _is_open_mpi(mpiexec):
        argv += ["-hosts", ",".join(hosts)]  # MPICH / Hydra spelling
    if _is_open_mpi(mpiexec):
        if hosts:
            argv += ["--host", ",".join(f"{h}:{ranks_per_node}" for h in hosts)]
        # no core binding: ranks run host threads (proxies, progress threads) beside the GPU work
        argv += ["--oversubscribe", "--bind-to", "none"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            argv += ["--allow-run-as-root"]
        if ranks_per_node < ranks:
            argv += ["--map-by", f"ppr:{ranks_per_node}:node"]
        for key in env_keys:  # forwarded to remote nodes too
            argv += ["-x", key]
    return argv
