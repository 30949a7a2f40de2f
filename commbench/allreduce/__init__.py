"""Backends of the ``allreduce`` family: NCCL (ctypes), torch symmetric memory, commbench's own kernels."""
