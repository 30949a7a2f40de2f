"""The only place that reads MPI/Slurm launch variables and builds the mpi4py control plane."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

_MPI_MARKERS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS")


def inside_mpi_job() -> bool:
    """True when this process was started as a rank by mpiexec or srun."""
    if any(k in os.environ for k in _MPI_MARKERS):
        return True
    return "SLURM_STEP_ID" in os.environ and "SLURM_PROCID" in os.environ


def inside_slurm_allocation() -> bool:
    """True inside salloc/sbatch (where `srun` can start ranks), but not inside a step."""
    return "SLURM_JOB_ID" in os.environ and not inside_mpi_job()


def launcher_rank() -> int | None:
    """This process's rank as its launcher numbered it (before MPI is up); None outside a job."""
    for key in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"):
        value = os.environ.get(key, "")
        if value.isdigit() and (key != "SLURM_PROCID" or "SLURM_STEP_ID" in os.environ):
            return int(value)
    return None


def slurm_step_tasks() -> int:
    """Tasks srun started in this step (0 outside a Slurm step)."""
    if "SLURM_STEP_ID" not in os.environ:
        return 0
    for key in ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def _tasks_per_node(spec: str) -> list[int]:
    """SLURM_TASKS_PER_NODE ("8(x2),4") -> [8, 8, 4]."""
    out = []
    for part in filter(None, spec.split(",")):
        count, _, rep = part.partition("(x")
        if count.isdigit():
            out += [int(count)] * (int(rep.rstrip(")")) if rep.rstrip(")").isdigit() else 1)
    return out


def slurm_allocation_tasks() -> tuple[int, int | None]:
    """(tasks of the Slurm job, tasks per node when every node has the same) or (0, None) outside one."""
    if "SLURM_JOB_ID" not in os.environ:
        return 0, None
    per_node = _tasks_per_node(os.environ.get("SLURM_TASKS_PER_NODE", ""))
    same = per_node[0] if per_node and len(set(per_node)) == 1 else None
    total = os.environ.get("SLURM_NTASKS", "")
    if total.isdigit():
        return int(total), same
    return sum(per_node), same


_JOB_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS", "SLURM_NPROCS")


def job_size() -> tuple[int, str] | None:
    """(ranks of the MPI job or Slurm allocation this process is in, "VAR=value" that said so),
    or None when no launcher variable names a positive count."""
    for var in _JOB_SIZE_VARS:
        raw = os.environ.get(var, "").strip()
        if raw.isdigit() and int(raw) > 0:
            return int(raw), f"{var}={raw}"
    return None


def slurm_job_nodes() -> tuple[int, str] | None:
    """(nodes of the Slurm job, "SLURM_JOB_NUM_NODES=value"), or None outside one."""
    raw = os.environ.get("SLURM_JOB_NUM_NODES", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw), f"SLURM_JOB_NUM_NODES={raw}"
    return None


def slurm_job_nodelist() -> str | None:
    """The Slurm job's compressed node list ("gpu[01-04]"), or None outside one."""
    return os.environ.get("SLURM_JOB_NODELIST") or None


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    local_size: int
    num_nodes: int
    hostname: str
    hosts: tuple[str, ...]  # hostname of every rank, by rank
    comm: Any  # mpi4py communicator (control plane only: host buffers)

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        self.comm.Barrier()

    def allgather(self, obj):
        return self.comm.allgather(obj)

    def bcast(self, obj, root: int = 0):
        return self.comm.bcast(obj, root=root)

    def sum_int(self, value: int) -> int:
        return int(self.comm.allreduce(int(value)))


def build_world() -> World:
    """Initialise MPI (through mpi4py) and describe this rank's place in the job."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    host = socket.gethostname()
    hosts = tuple(comm.allgather(host))
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    world = World(rank=comm.Get_rank(), size=comm.Get_size(), local_rank=local.Get_rank(),
                  local_size=local.Get_size(), num_nodes=len(set(hosts)), hostname=host,
                  hosts=hosts, comm=comm)
    local.Free()
    return world
