"""What machine a run happens on: ``machine`` (versions, GPUs, topology, multicast: `info` and
run.json), ``gpus`` (GPU count), ``mpi`` (the mpiexec of the installed mpi4py), ``hosts`` (the
allocation's hosts, pair rounds), ``nccl_log`` (what NCCL chose, from its debug log) and ``view``
(the `info` table)."""
