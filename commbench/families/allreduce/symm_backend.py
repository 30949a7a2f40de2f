"""torch symmetric-memory all-reduce ops: one-shot, two-shot (peer loads) and multimem (multicast).

The family calls this only after the multicast gate has passed for
``torch_multimem``; the other two never need multicast.
"""
from __future__ import annotations

from ...comm.process_group import symm_group_name
from ...errors import SkipCase
from . import data
from .state import ArState


def setup(case, ctx) -> ArState:
    import torch
    import torch.distributed._symmetric_memory as symm_mem

    world = ctx.world
    if world.num_nodes > 1:
        raise SkipCase(f"{case.backend} needs all ranks on one node (peer loads over NVLink)")
    group = symm_group_name(ctx)
    count = case.size_bytes // data.ELEMENT_BYTES[case.dtype]
    dtype = data.torch_dtype(case.dtype)
    inp = symm_mem.empty(count, dtype=dtype, device=ctx.device)
    symm_mem.rendezvous(inp, group)
    out = torch.empty_like(inp)
    stream = torch.cuda.Stream(device=ctx.device)
    ops = torch.ops.symm_mem
    result = {"out": out}

    if case.backend == "torch_one_shot":
        if hasattr(ops, "one_shot_all_reduce_out"):
            def op() -> None:
                ops.one_shot_all_reduce_out(inp, "sum", group, out)
        else:
            def op() -> None:
                result["out"] = ops.one_shot_all_reduce(inp, "sum", group)
    elif case.backend == "torch_two_shot":
        if not hasattr(ops, "two_shot_all_reduce_out"):
            raise SkipCase(f"torch {torch.__version__} has no symm_mem.two_shot_all_reduce_out")

        def op() -> None:
            ops.two_shot_all_reduce_out(inp, "sum", group, out)
    elif case.backend == "torch_multimem":
        # In place: the check refills the input before its one op, so the result is exact.
        result["out"] = inp

        def op() -> None:
            ops.multimem_all_reduce_(inp, "sum", group)
    else:
        raise SkipCase(f"unknown torch symmetric memory backend {case.backend!r}")

    def enqueue() -> None:
        with torch.cuda.stream(stream):
            op()

    state = ArState(stream=stream, extra={}, world=world, dtype=case.dtype, count=count,
                    enqueue=enqueue, refill=lambda: data.fill_input(inp, world.rank),
                    output=lambda: result["out"],
                    clear=lambda: out.fill_(-1) if result["out"] is out else None)
    state.refill()
    torch.cuda.synchronize()
    world.comm.Barrier()
    # Try the op once so an unsupported size or dtype becomes a skip, not a failed launch.
    try:
        enqueue()
        stream.synchronize()
    except RuntimeError as exc:
        raise SkipCase(f"{case.backend}: torch refused this case: {str(exc).splitlines()[0]}") from exc
    state.closers.append(lambda keep=(inp, out): torch.cuda.synchronize())
    return state
