"""NVSHMEM support shared by families: locating the library, bootstrap, build flags.

Nothing here imports GPU packages at import time; ``boot`` loads CUDA code only
when a rank initialises NVSHMEM.
"""
