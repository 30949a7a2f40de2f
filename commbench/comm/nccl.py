"""The `nccl` backend's communicator: libnccl called directly (commbench.nccl_lib), one
communicator over the MPI world per launch. Its ops are enqueued by comm.nccl_enqueue."""
from __future__ import annotations

from .. import nccl_lib, safety
from ..errors import SkipCase
from .context import RankContext

_KEY = "nccl_comm"


def communicator(ctx: RankContext) -> nccl_lib.Comm:
    """The launch's NCCL communicator over the MPI world (created once, destroyed at the end)."""
    if _KEY not in ctx.cache:
        try:
            nccl_lib.library()
        except nccl_lib.NcclError as exc:
            raise SkipCase(str(exc)) from None
        safety.before_communicator("NCCL communicator")   # NCCL reads NVLS's switch at init
        comm = nccl_lib.Comm(ctx.world)
        ctx.cache[_KEY] = comm
        ctx.on_close(comm.destroy)
    return ctx.cache[_KEY]
