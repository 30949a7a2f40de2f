"""NCCL all-reduce through libnccl, with ordinary or window-registered (symmetric) buffers.

NCCL's own debug output (TUNING lines) goes to a file per process; after each
Case's check the new lines are parsed into ``nccl_algo``/``nccl_proto`` and a
``nccl_algo_honoured`` flag when the Case forced ``NCCL_ALGO``.
"""
from __future__ import annotations

import os

from ...sysinfo import nccl_log
from ...errors import SkipCase
from ... import nccl_lib
from . import data
from .state import ArState

_COMM_KEY = "allreduce.nccl_comm"
_LOG_KEY = "allreduce.nccl_log"


def _comm(ctx) -> nccl_lib.Comm:
    if _COMM_KEY not in ctx.cache:
        # The launch set NCCL_DEBUG* (AllReduceFamily.launch_env); NCCL opens the file at its first
        # communicator, so its folder must exist on this node first.
        path = nccl_log.resolve_debug_file()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        comm = nccl_lib.Comm(ctx.world)
        # Resolved after init: NCCL has opened (created) its file by then.
        ctx.cache[_LOG_KEY] = nccl_log.resolve_debug_file()
        ctx.cache[_COMM_KEY] = comm
        ctx.on_close(comm.destroy)
    return ctx.cache[_COMM_KEY]


def setup(case, ctx) -> ArState:
    import torch

    try:
        code = nccl_lib.version()
    except nccl_lib.NcclError as exc:
        raise SkipCase(str(exc)) from exc
    symmetric = case.backend == "nccl_symm"
    if symmetric and not nccl_lib.has_windows():
        raise SkipCase(f"NCCL {nccl_lib.version_str(code)} has no window registration (needs >= 2.27)")
    world = ctx.world
    comm = _comm(ctx)
    count = case.size_bytes // data.ELEMENT_BYTES[case.dtype]
    nbytes = count * data.ELEMENT_BYTES[case.dtype]
    stream = torch.cuda.Stream(device=ctx.device)
    closers = []
    if symmetric:
        send_ptr, recv_ptr = nccl_lib.mem_alloc(nbytes), nccl_lib.mem_alloc(nbytes)
        closers += [lambda: nccl_lib.mem_free(send_ptr), lambda: nccl_lib.mem_free(recv_ptr)]
        try:
            wins = [comm.register_window(send_ptr, nbytes), comm.register_window(recv_ptr, nbytes)]
        except nccl_lib.NcclError as exc:
            for fn in reversed(closers):
                fn()
            raise SkipCase(f"NCCL window registration refused: {exc}") from exc
        closers += [lambda w=w: comm.deregister_window(w) for w in wins]
        inp = data.view(send_ptr, count, case.dtype, ctx.device)
        out = data.view(recv_ptr, count, case.dtype, ctx.device)
    else:
        inp = torch.empty(count, dtype=data.torch_dtype(case.dtype), device=ctx.device)
        out = torch.empty_like(inp)
        send_ptr, recv_ptr = inp.data_ptr(), out.data_ptr()

    cursor = nccl_log.LogCursor(ctx.cache.get(_LOG_KEY))
    extra = {"nccl_version": nccl_lib.version_str(code), "nccl_algo": "", "nccl_proto": "",
             "nccl_kernel": "", "nccl_algo_forced": os.environ.get("NCCL_ALGO", ""),
             "nccl_proto_forced": os.environ.get("NCCL_PROTO", ""), "nccl_algo_honoured": ""}

    def enqueue() -> None:
        comm.all_reduce(send_ptr, recv_ptr, count, case.dtype, stream.cuda_stream)

    def read_log() -> None:
        choices = cursor.choices()
        extra.update(nccl_log.summarize(choices, "AllReduce", nbytes))
        honoured = nccl_log.algo_honoured(extra["nccl_algo_forced"] or None, extra["nccl_algo"])
        extra["nccl_algo_honoured"] = "" if honoured is None else honoured
        if world.size == 1 and not extra["nccl_algo"]:
            extra["nccl_note"] = "1 rank: NCCL copies locally and reports no algorithm"

    state = ArState(stream=stream, extra=extra, world=world, dtype=case.dtype, count=count,
                    enqueue=enqueue, refill=lambda: data.fill_input(inp, world.rank),
                    output=lambda: out, clear=lambda: out.fill_(-1), after_check=read_log)
    state.refill()
    torch.cuda.synchronize()
    state.closers.extend(closers)
    state.closers.append(torch.cuda.synchronize)
    return state
