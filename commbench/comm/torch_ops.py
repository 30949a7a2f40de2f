"""Collectives through torch.distributed: NCCL (CUDA tensors) and gloo (CPU tensors).

One process group per launch, created on first use with backend
"cpu:gloo,cuda:nccl" where CUDA exists, so tensors choose their backend.
torch has no out-of-place broadcast/reduce: those are a local copy on the
rank that holds the data plus the in-place op (docs/families/collectives.md).
"""
from __future__ import annotations

import socket

from .context import RankContext


def tcp_store(world):
    """A torch TCPStore served by rank 0 on a port the OS picks (no port race), address sent over MPI."""
    from torch.distributed import TCPStore

    if world.rank == 0:
        # one node: loopback needs no name resolution; several: rank 0's host name
        host = "127.0.0.1" if world.num_nodes == 1 else socket.gethostname()
        store = TCPStore(host, 0, world.size, is_master=True, wait_for_workers=False)
        addr = (host, store.port)
    else:
        store, addr = None, None
    addr = world.bcast(addr)
    if store is None:
        store = TCPStore(addr[0], addr[1], world.size, is_master=False)
    return store


def process_group(ctx: RankContext):
    """The launch's default process group (created once, destroyed at launch end)."""
    import torch
    import torch.distributed as dist

    if "torch_pg" in ctx.cache:
        return ctx.cache["torch_pg"]
    if dist.is_initialized():  # another family of this launch made the default group: share it
        ctx.cache["torch_pg"] = dist.group.WORLD
        return ctx.cache["torch_pg"]
    world = ctx.world
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    kwargs = {}
    if ctx.device.startswith("cuda") and world.local_size <= torch.cuda.device_count():
        # eager NCCL set-up; skipped when ranks share a GPU (NCCL refuses that, gloo still works)
        kwargs["device_id"] = torch.device(ctx.device)
    dist.init_process_group(backend=backend, store=tcp_store(world), rank=world.rank,
                            world_size=world.size, **kwargs)
    ctx.cache["torch_pg"] = dist.group.WORLD
    ctx.on_close(dist.destroy_process_group)
    return ctx.cache["torch_pg"]


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
