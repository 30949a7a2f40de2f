"""The collectives family: collective ops over NCCL/gloo (torch.distributed), NCCL direct and
MPI (mpi4py): buffers, ops, checks (``family.py`` is the entry point)."""

from .family import FAMILY

__all__ = ["FAMILY"]
