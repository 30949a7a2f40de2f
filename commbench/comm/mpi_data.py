"""Collectives through mpi4py on host buffers (numpy arrays, or CPU tensors' numpy views).

The data moves on a duplicate of the world communicator, so control-plane
barriers never interleave with measured traffic.
"""
from __future__ import annotations

from .context import RankContext
from .ops import ROOT


def data_comm(ctx: RankContext):
    if "mpi_data_comm" not in ctx.cache:
        comm = ctx.world.comm.Dup()
        ctx.cache["mpi_data_comm"] = comm
        ctx.on_close(comm.Free)
    return ctx.cache["mpi_data_comm"]


def _host(buf):
    """The numpy array mpi4py reads: the buffer itself, or a CPU tensor's view."""
    return buf.numpy() if hasattr(buf, "numpy") else buf


def make_runner(op: str, bufs, comm, n: int, rank: int, in_place: bool, rop: str):
    from mpi4py import MPI

    red = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[rop]
    send, recv = _host(bufs.send), _host(bufs.recv)
    if op == "all_reduce":
        return (lambda: comm.Allreduce(MPI.IN_PLACE, recv, op=red)) if in_place else (
            lambda: comm.Allreduce(send, recv, op=red))
    if op == "all_gather":
        return (lambda: comm.Allgather(MPI.IN_PLACE, recv)) if in_place else (
            lambda: comm.Allgather(send, recv))
    if op == "reduce_scatter":
        # in place, MPI reads the whole input from the receive buffer and writes the
        # result at its start; the result view is moved there by the family
        return (lambda: comm.Reduce_scatter_block(MPI.IN_PLACE, send, op=red)) if in_place else (
            lambda: comm.Reduce_scatter_block(send, recv, op=red))
    if op == "alltoall":
        return lambda: comm.Alltoall(send, recv)
    if op == "broadcast":
        if in_place:
            return lambda: comm.Bcast(recv, root=0)

        def bcast_oop():
            if rank == 0:
                recv[:] = send
            comm.Bcast(recv, root=0)
        return bcast_oop
    if op == "reduce":
        if in_place:
            return lambda: comm.Reduce(MPI.IN_PLACE if rank == 0 else recv, recv if rank == 0 else None,
                                       op=red, root=0)
        return lambda: comm.Reduce(send, recv, op=red, root=0)
    if op == "gather":   # in place, the root's own chunk already sits in the receive buffer
        if in_place and rank == ROOT:
            return lambda: comm.Gather(MPI.IN_PLACE, recv, root=ROOT)
        return lambda: comm.Gather(send, recv if rank == ROOT else None, root=ROOT)
    if op == "scatter":  # in place, the root keeps its own chunk where it is
        if in_place and rank == ROOT:
            return lambda: comm.Scatter(send, MPI.IN_PLACE, root=ROOT)
        return lambda: comm.Scatter(send if rank == ROOT else None, recv, root=ROOT)
    if op == "sendrecv":
        dst, src = (rank + 1) % n, (rank - 1) % n
        return lambda: comm.Sendrecv(send, dest=dst, recvbuf=recv, source=src)
    raise ValueError(op)
