"""Native timed loops: the runner enters native code once per timed batch (kernels/timed_loop.cu).

A Case whose op is enqueued from the host (a libnccl call, one of our kernel launchers) hands the
runner a :class:`NativeOp`: the address of a C function ``int enqueue(void* arg, cudaStream_t)``
and its argument. Warm-up, the events between ops, the event pair around a pipelined batch and
CUDA-graph capture then all happen in C++, so no interpreter time sits between two ops and
small-message times agree with nccl-tests' loop (docs/metrics.md, "Timing").
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

from ..errors import CommbenchError

from .timing import GRAPH_LAUNCHES, PIPELINED_REPEATS   # one definition: the Python and native loops agree


class NativeLoopError(CommbenchError):
    """A CUDA call of the timed loop, or the op itself, failed."""


@dataclass
class NativeOp:
    """One host-enqueued op as native code sees it."""

    fn: int  # address of `int enqueue(void* arg, cudaStream_t stream)`; 0 on success
    arg: int  # address of its argument
    describe: Callable[[int], str] = str  # op's own return code -> message
    keep: tuple[Any, ...] = field(default=())  # what must outlive the op (ctypes structs, buffers)


@lru_cache(maxsize=None)
def _lib() -> ctypes.CDLL:
    from .. import jit

    lib = jit.load("timed_loop")
    vp, i, pi, pf = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_float)
    lib.cb_loop_enqueue.argtypes = [vp, vp, vp, i, pi, pi]
    lib.cb_loop_events.argtypes = [vp, vp, vp, i, pf, pi, pi]
    lib.cb_loop_events_stamped.argtypes = [vp, vp, vp, i, pf, ctypes.POINTER(ctypes.c_longlong), pi, pi]
    lib.cb_loop_batch.argtypes = [vp, vp, vp, i, pf, pi, pi]
    lib.cb_graph_capture.argtypes = [vp, vp, vp, i, ctypes.POINTER(vp), pi, pi]
    lib.cb_graph_batch.argtypes = [vp, vp, i, i, pf]
    lib.cb_graph_destroy.argtypes = [vp]
    lib.cb_cuda_error_string.argtypes = [i]
    lib.cb_cuda_error_string.restype = ctypes.c_char_p
    return lib


def _call(op: NativeOp, what: str, fn, *args) -> None:
    op_err, failed_at = ctypes.c_int(0), ctypes.c_int(-1)
    rc = fn(*args, ctypes.byref(op_err), ctypes.byref(failed_at))
    _raise(op, what, rc, op_err.value, failed_at.value)


def _raise(op: NativeOp, what: str, rc: int, op_err: int = 0, failed_at: int = -1) -> None:
    if rc == 0:
        return
    if rc == -1:
        raise NativeLoopError(f"{what}: op {failed_at} failed: {op.describe(op_err)}")
    raise NativeLoopError(f"{what}: CUDA error {rc}: {_lib().cb_cuda_error_string(rc).decode()}")


def warm_up(op: NativeOp, stream: int, n: int) -> None:
    """``n`` ops back to back, then wait for them (module load and connection set-up stay out)."""
    if n > 0:
        _call(op, "warm-up", _lib().cb_loop_enqueue, op.fn, op.arg, stream, n)


def time_events(op: NativeOp, stream: int, iters: int, barrier: Callable[[], None],
                host_ns: list[int] | None = None) -> list[float]:
    """An event between consecutive ops: one sample per op (nccl-tests -I), no sync in the batch.

    ``host_ns`` (a list, filled in place): the host clock when the first event was recorded,
    then before each op's enqueue (commbench.profile.skew)."""
    out = (ctypes.c_float * iters)()
    barrier()
    if host_ns is None:
        _call(op, "events batch", _lib().cb_loop_events, op.fn, op.arg, stream, iters, out)
    else:
        stamps = (ctypes.c_longlong * (iters + 1))()
        _call(op, "events batch", _lib().cb_loop_events_stamped, op.fn, op.arg, stream, iters, out, stamps)
        host_ns[:] = list(stamps)
    return [float(x) for x in out]


def time_pipelined(op: NativeOp, stream: int, iters: int, barrier: Callable[[], None],
                   repeats: int = PIPELINED_REPEATS) -> list[float]:
    """One event pair around ``iters`` ops (nccl-tests' default loop); ``repeats`` samples."""
    out, value = [], ctypes.c_float()
    for _ in range(repeats):
        barrier()
        _call(op, "pipelined batch", _lib().cb_loop_batch, op.fn, op.arg, stream, iters, ctypes.byref(value))
        out.append(float(value.value))
    return out


def time_graph(op: NativeOp, stream: int, iters: int, barrier: Callable[[], None],
               repeats: int = PIPELINED_REPEATS, launches: int = GRAPH_LAUNCHES) -> list[float]:
    """``iters`` ops captured in one CUDA graph; a sample is ``launches`` back-to-back replays
    divided by launches x iters, exactly nccl-tests ``-G launches``; ``repeats`` samples."""
    lib, exec_ = _lib(), ctypes.c_void_p()
    _call(op, "graph capture", lib.cb_graph_capture, op.fn, op.arg, stream, iters, ctypes.byref(exec_))
    try:
        _raise(op, "graph upload", lib.cb_graph_batch(exec_, stream, 1, iters, ctypes.byref(ctypes.c_float())))
        out, value = [], ctypes.c_float()
        for _ in range(repeats):
            barrier()
            _raise(op, "graph batch", lib.cb_graph_batch(exec_, stream, launches, iters, ctypes.byref(value)))
            out.append(float(value.value))
        return out
    finally:
        lib.cb_graph_destroy(exec_)


TIMERS = {"events": time_events, "pipelined": time_pipelined, "graph": time_graph}

MAX_CALL_ARGS, MAX_CALLS = 16, 4  # kernels/timed_loop.cu: CB_MAX_ARGS, CB_MAX_CALLS
_MASK64 = (1 << 64) - 1


class _Call(ctypes.Structure):  # struct cb_call
    _fields_ = [("fn", ctypes.c_void_p), ("nargs", ctypes.c_int), ("args", ctypes.c_ulonglong * MAX_CALL_ARGS)]


class _Calls(ctypes.Structure):  # struct cb_calls
    _fields_ = [("n", ctypes.c_int), ("call", _Call * MAX_CALLS)]


def _word(arg: Any) -> int:
    """One launcher argument as the 64-bit integer native code passes: ints, ctypes integers and
    pointers, ctypes arrays and structures (their address). Floating point cannot travel this way."""
    if arg is None:
        return 0
    if isinstance(arg, (float, ctypes.c_float, ctypes.c_double)):
        raise TypeError("a launcher argument of floating-point type cannot go through cb_calls_enqueue")
    if isinstance(arg, int):
        return arg & _MASK64
    if isinstance(arg, ctypes.c_void_p):
        return arg.value or 0
    if isinstance(arg, (ctypes.Array, ctypes.Structure)):
        return ctypes.addressof(arg)
    if isinstance(arg, ctypes._Pointer):
        return ctypes.cast(arg, ctypes.c_void_p).value or 0
    if isinstance(arg, ctypes._SimpleCData):
        return int(arg.value) & _MASK64
    raise TypeError(f"cannot pass {type(arg).__name__} to a native launcher call")


def launcher_op(calls: list[tuple[Any, tuple]]) -> NativeOp:
    """A native op that calls C launchers ``int f(args..., cudaStream_t)`` in order, each with the
    same integer/pointer arguments every time (kernels/timed_loop.cu, cb_calls_enqueue): the
    launches a family otherwise makes through ctypes once per op. Their return codes are CUDA
    errors. The arguments (ctypes arrays, buffers) are kept alive with the op."""
    if not 1 <= len(calls) <= MAX_CALLS:
        raise ValueError(f"1 to {MAX_CALLS} calls per native op, got {len(calls)}")
    spec = _Calls()
    spec.n = len(calls)
    for slot, (fn, args) in zip(spec.call, calls):
        if len(args) > MAX_CALL_ARGS:
            raise ValueError(f"a launcher call takes at most {MAX_CALL_ARGS} arguments besides the stream")
        slot.fn = ctypes.cast(fn, ctypes.c_void_p).value
        slot.nargs = len(args)
        for i, a in enumerate(args):
            slot.args[i] = _word(a)
    lib = _lib()
    fn = ctypes.cast(lib.cb_calls_enqueue, ctypes.c_void_p).value
    return NativeOp(fn=fn, arg=ctypes.addressof(spec),
                    describe=lambda code: f"CUDA error {code}: {lib.cb_cuda_error_string(code).decode()}",
                    keep=(spec, calls))
