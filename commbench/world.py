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
