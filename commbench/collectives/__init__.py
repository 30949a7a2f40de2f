"""Collective ops over NCCL/gloo (torch.distributed) and MPI (mpi4py): buffers, ops, checks."""
