"""The collectives' untimed single op (the values check and `check: bitwise` run the same one) and
their bitwise hooks (measure/state.BitwiseHooks): restore the inputs, run the op once on the head
slice of the buffers (the slice the check reads), and the exact known answer of the result."""
from __future__ import annotations

from ...measure.state import BitwiseHooks


def run_once(state) -> None:
    """Inputs restored as set-up wrote them (timed in-place iterations overwrote them), outputs
    zeroed, the op run once on the buffers the check reads, and waited for."""
    from ...comm import alltoallv, buffers

    if state.bufs.layout is not None:
        alltoallv.refill(state.bufs, state.rank)
    else:
        buffers.refill(state.op, state.bufs, state.rank, state.in_place)
    if state.stream is None:
        state.runner()
        return
    import torch

    torch.cuda.synchronize()  # the refill ran on the current stream
    if state.nccl is not None:   # the native entry the timed loop called, on the head slice
        state.nccl.check_once(state.stream.cuda_stream)
    else:
        with torch.cuda.stream(state.stream):
            state.runner()
    state.stream.synchronize()


def hooks(state) -> BitwiseHooks:
    """The state's bitwise hooks. The known answer is the values check's, where it is exact in the
    element type (the pattern's small integers; not where a sum outgrows the type's exact range)."""
    from ...comm import buffers, pattern

    bufs = state.bufs

    def repeat() -> None:
        run_once(state)

    def outputs() -> list:
        return [state.bufs.result]

    if bufs.layout is not None:
        return BitwiseHooks(repeat=repeat, outputs=outputs,
                            no_expected="alltoallv's known answer is per sender block (the values check has it)")
    host = buffers.NUMPY if not hasattr(bufs.result, "numel") else None
    if buffers.expected_chunk(state.op, state.reduce_op, state.n, state.rank, bufs.count, 0, 1,
                              buffers.NUMPY) is None:
        return BitwiseHooks(repeat=repeat, outputs=outputs)   # no result on this rank (a non-root)
    unchecked = f"{state.dtype} does not hold every expected value of this {state.op} exactly"

    def expected(index: int, start: int, stop: int):
        device = host or state.bufs.result.device
        exp = buffers.expected_chunk(state.op, state.reduce_op, state.n, state.rank, state.bufs.count,
                                     start, stop, device)
        if exp is None or len(exp) == 0:
            return exp
        top = float(abs(exp).max())
        return exp if pattern.tolerance(state.dtype, top) == 0 else None

    return BitwiseHooks(repeat=repeat, outputs=outputs, expected=expected, no_expected=unchecked)
