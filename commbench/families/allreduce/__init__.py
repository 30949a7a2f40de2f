"""The allreduce family: NCCL (ctypes), NCCL symmetric buffers, torch symmetric memory and
commbench's own one-shot/two-shot kernels, side by side (``family.py`` is the entry point)."""

from .family import FAMILY

__all__ = ["FAMILY"]
