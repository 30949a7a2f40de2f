"""Collectives through torch.distributed: NCCL (CUDA tensors) and gloo (CPU tensors).

They run on the launch's process group (``process_group.process_group``), which the caller
creates first. torch has no out-of-place broadcast/reduce: those are a local copy on the
rank that holds the data plus the in-place op (docs/families/collectives.md).
"""
from __future__ import annotations

from .ops import ROOT


def reduce_op(name: str):
    import torch.distributed as dist

    return {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[name]


def make_runner(op: str, bufs, n: int, rank: int, in_place: bool, rop: str):
    """A zero-argument callable that enqueues one ``op`` (blocking for gloo)."""
    import torch.distributed as dist

    red = reduce_op(rop)
    send, recv = bufs.send, bufs.recv
    if op == "all_reduce":
        if in_place:
            return lambda: dist.all_reduce(send, op=red)

        def all_reduce_oop():
            recv.copy_(send)
            dist.all_reduce(recv, op=red)
        # torch lacks out-of-place all_reduce; the copy is counted, as documented
        return all_reduce_oop
    if op == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(recv, send)
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(recv, send, op=red)
    if op == "alltoall":
        return lambda: dist.all_to_all_single(recv, send)
    if op in ("broadcast", "reduce"):
        call = (lambda: dist.broadcast(recv, src=0)) if op == "broadcast" else (
            lambda: dist.reduce(recv, dst=0, op=red))
        if in_place:
            return call
        copy_here = op == "reduce" or rank == 0

        def rooted_oop():
            if copy_here:
                recv.copy_(send)
            call()
        return rooted_oop
    if op == "gather":   # the root's receive buffer as n chunk views (in place, its own chunk is send)
        chunks = list(recv.chunk(n)) if rank == ROOT else None
        return lambda: dist.gather(send, gather_list=chunks, dst=ROOT)
    if op == "scatter":
        chunks = list(send.chunk(n)) if rank == ROOT else None
        return lambda: dist.scatter(recv, scatter_list=chunks, src=ROOT)
    if op == "sendrecv":
        peer_send, peer_recv = (rank + 1) % n, (rank - 1) % n
        if n == 1:
            return lambda: recv.copy_(send)

        def sendrecv():
            ops = [dist.P2POp(dist.isend, send, peer_send), dist.P2POp(dist.irecv, recv, peer_recv)]
            for work in dist.batch_isend_irecv(ops):
                work.wait()
        return sendrecv
    raise ValueError(op)
