"""The nvshmem family: point-to-point and collective NVSHMEM Cases (``family.py``), and the
NVSHMEM support other families share: locating the library, bootstrap, build flags.

Nothing here imports GPU packages at import time; ``boot`` loads CUDA code only
when a rank initialises NVSHMEM.
"""

from .family import FAMILY

__all__ = ["FAMILY"]
