"""The nvshmem family: point-to-point and collective NVSHMEM Cases. ``ops.py`` is the op table
(one row per op), ``family.py`` reads it; ``p2p.py`` and ``coll.py`` set up, launch and check;
``state.py`` declares the per-Case state. NVSHMEM start-up (install, bootstrap, finalize) is
``commbench.comm.nvshmem``.

Nothing here imports GPU packages at import time.
"""
