"""The communication floor every family stands on: the collective op table, verifiable data
patterns and buffers, the rank's context, the NCCL communicator and its one native enqueue, the
torch process group, the MPI data communicator, NVSHMEM start-up and the CUDA IPC handshake.
Nothing here imports a family; ``__init__`` imports nothing, so one module can be used without the
others (and without torch or mpi4py)."""
