"""Buffers for one collective Case, filled with the verifiable pattern, and the check.

Torch tensors (CUDA for nccl, CPU for gloo), or numpy arrays for device ``NUMPY`` (the mpi
backend: mpi4py reads them directly, and a rank whose Cases are all host MPI never imports
torch, about a second of CPU per rank). Fill and check work in chunks so an 8 GiB buffer
never needs an 8 GiB index array.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..dtypes import DTYPES, torch_dtype
from . import pattern
from .ops import OPS

CHUNK = 1 << 26  # elements per fill/check step
NUMPY = "numpy"  # the device of host buffers held as numpy arrays (no torch)


def chunk_ranges(count: int, chunk: int):
    """[start, stop) of each step of at most ``chunk`` elements over ``count``: how a pattern is
    written and checked without temporaries the size of the buffer (every family's check)."""
    for start in range(0, count, chunk):
        yield start, min(start + chunk, count)


@dataclass
class Buffers:
    send: object
    recv: object
    result: object  # the view the op's output lands in (what check reads)
    count: int
    extra: dict = field(default_factory=dict)
    # rotation pool (native nccl loop): call k of the timed loop uses send/recv shifted by
    # shift_bytes * (k % steps); steps = 1 means the same buffers every call
    shift_bytes: int = 0
    steps: int = 1
    # the device allocations under send/recv (whole, pools and offsets included): what a
    # registration (comm.registration) hands to NCCL
    allocations: list = field(default_factory=list)
    layout: object = None   # alltoallv: this rank's comm.traffic.Layout (send/recv blocks per peer)


def _is_numpy(buf) -> bool:
    return not hasattr(buf, "numel")


def _zero(buf) -> None:
    if _is_numpy(buf):
        buf[:] = 0
    else:
        buf.fill_(0)


def fill(buf, rank: int, offset: int = 0) -> None:
    """Rank ``rank``'s pattern (pattern.values) into ``buf``, element i holding index i + offset."""
    if _is_numpy(buf):
        import numpy as np

        for start, stop in chunk_ranges(buf.size, CHUNK):
            buf[start:stop] = pattern.values(rank, np.arange(start + offset, stop + offset, dtype=np.int64))
        return
    import torch

    for start, stop in chunk_ranges(buf.numel(), CHUNK):
        idx = torch.arange(start + offset, stop + offset, device=buf.device, dtype=torch.int64)
        buf[start:stop] = pattern.values(rank, idx).to(buf.dtype)


def rotation_steps(op: str, count: int, n: int, elem_bytes: int, span_bytes: int) -> tuple[int, int]:
    """(shift_bytes, steps) of a rotation through ``span_bytes``: the shift is the larger of the
    send and receive buffers (nccl-tests' max(sendBytes, expectedBytes)), steps how many shifted
    copies fit in the span (at least 1)."""
    spec = OPS[op]
    return rotation(count * elem_bytes * max(n if spec.send_chunks else 1, n if spec.recv_chunks else 1),
                    span_bytes)


def rotation(shift_bytes: int, span_bytes: int) -> tuple[int, int]:
    """(shift_bytes, steps): how many copies ``shift_bytes`` apart fit in ``span_bytes`` (at least 1)."""
    if shift_bytes <= 0 or span_bytes <= shift_bytes:
        return shift_bytes, 1
    return shift_bytes, span_bytes // shift_bytes


def new_buffer(own: int, td, elem: int, device, shift_bytes: int, steps: int, offset_bytes: int, alloc_bytes,
         pools: list, allocations: list):
    """A buffer of ``own`` elements ``offset_bytes`` past the start of its allocation (nccl-tests'
    -u misalignment), at the head of a pool of ``steps`` slices ``shift_bytes`` apart.
    ``alloc_bytes(nbytes)`` gives the allocation as a uint8 tensor (registered buffers come from
    ncclMemAlloc); None: torch's allocator."""
    import torch

    span = own if steps == 1 else steps * (shift_bytes // elem)
    total = span + offset_bytes // elem
    if alloc_bytes is None:
        base = torch.empty(max(total, 1), dtype=td, device=device)
    else:
        base = alloc_bytes(max(total, 1) * elem).view(td)
    allocations.append(base)
    head = base[offset_bytes // elem:]
    if steps > 1:
        pools.append((head[:span].view(steps, shift_bytes // elem), own))
    return head[:own]


def allocate(op: str, count: int, n: int, rank: int, dtype: str, device: str, in_place: bool,
             span_bytes: int = 0, offset_bytes: int = 0, alloc_bytes=None) -> Buffers:
    """Allocate and fill send/recv for ``op`` with nccl-tests' in-place aliasing (ops.OPS).

    ``span_bytes`` > 0: each buffer is the head of a pool of ``steps`` slices ``shift_bytes``
    apart, every slice holding the same verifiable input (rotation_steps), for timed loops that
    must not reuse the previous iteration's data from L2 (nccl-tests shifts its buffers the same
    way). The views, the check and the Python runners use the head slice only. ``offset_bytes``
    (a multiple of the element size) shifts every buffer off its allocation's alignment.
    Device ``NUMPY``: numpy arrays in host memory (no rotation: ``span_bytes`` must be 0)."""
    spec = OPS[op]
    mine = slice(rank * count, (rank + 1) * count)
    form = spec.in_place if in_place else None
    if device == NUMPY:
        import numpy as np

        td, torch = np.dtype(DTYPES[dtype].torch_name), None
        elem, span_bytes = td.itemsize, 0
    else:
        import torch

        td = torch_dtype(dtype)
        elem = torch.empty((), dtype=td).element_size()
    shift_bytes, steps = rotation_steps(op, count, n, elem, span_bytes)
    pools = []  # (pool viewed as steps x slice, elements of the buffer at the head of each slice)
    allocations: list = []

    def new(chunks: bool):
        own = count * (n if chunks else 1)
        if torch is None:
            skip = offset_bytes // elem
            return np.empty(own + skip, dtype=td)[skip:]
        return new_buffer(own, td, elem, device, shift_bytes, steps, offset_bytes, alloc_bytes, pools,
                          allocations)

    if form == "recv_slice":        # the send buffer is this rank's chunk of the output
        recv = new(spec.recv_chunks)
        send = recv[mine]
    elif form == "send_slice":      # the output is this rank's chunk of the input
        send = new(spec.send_chunks)
        recv = send[mine]
    elif form == "same":
        send = recv = new(spec.send_chunks)
    else:
        send, recv = new(spec.send_chunks), new(spec.recv_chunks)
    if recv is not send and form != "send_slice":
        _zero(recv)
    fill(send, rank)
    copy_heads(pools, steps)
    return Buffers(send, recv, recv, count, shift_bytes=shift_bytes, steps=steps, allocations=allocations)


def copy_heads(pools: list, steps: int) -> None:
    """Every slice of each rotation pool gets its head's contents (inputs, zeroed outputs)."""
    for pool, own in pools:
        pool[1:, :own].copy_(pool[0, :own].expand(steps - 1, own))


def refill(op: str, bufs: Buffers, rank: int, in_place: bool) -> None:
    """Restore inputs before the check (timed in-place iterations overwrote them)."""
    if not in_place or OPS[op].in_place == "recv_slice":
        _zero(bufs.recv)
    fill(bufs.send, rank)


def expected_chunk(op: str, reduce_op: str, n: int, rank: int, count: int, start: int, stop: int, device):
    """Expected values of result positions [start, stop) on ``rank``; None if unchecked there."""
    if device == NUMPY:
        import numpy as np

        return OPS[op].expected(reduce_op, n, rank, count, np.arange(start, stop, dtype=np.int64))
    import torch

    j = torch.arange(start, stop, device=device, dtype=torch.int64)
    return OPS[op].expected(reduce_op, n, rank, count, j)


def count_wrong(op: str, reduce_op: str, bufs: Buffers, n: int, rank: int, dtype: str) -> int:
    """Elements of the result that differ from the expected values on this rank."""
    res = bufs.result
    if _is_numpy(res):
        return _count_wrong_numpy(op, reduce_op, bufs, n, rank, dtype)
    wrong = 0
    for start, stop in chunk_ranges(res.numel(), CHUNK):
        exp = expected_chunk(op, reduce_op, n, rank, bufs.count, start, stop, res.device)
        if exp is None:
            return 0
        wrong += mismatches(res[start:stop], exp, dtype)
    return wrong


def mismatches(got, exp, dtype: str) -> int:
    """Elements of tensor ``got`` beyond ``dtype``'s tolerance (pattern.tolerance) of ``exp``."""
    import torch

    got, exp = got.to(torch.float64), exp.to(torch.float64)
    tol = pattern.tolerance(dtype, float(exp.abs().max()) if exp.numel() else 0.0)
    return int((~((got - exp).abs() <= tol * exp.abs())).sum())   # NaN compares false: counted wrong


def _count_wrong_numpy(op: str, reduce_op: str, bufs: Buffers, n: int, rank: int, dtype: str) -> int:
    import numpy as np

    res, wrong = bufs.result, 0
    for start, stop in chunk_ranges(res.size, CHUNK):
        exp = expected_chunk(op, reduce_op, n, rank, bufs.count, start, stop, NUMPY)
        if exp is None:
            return 0
        got, exp = res[start:stop].astype(np.float64), np.asarray(exp, dtype=np.float64)
        tol = pattern.tolerance(dtype, float(np.abs(exp).max()) if exp.size else 0.0)
        wrong += int(np.count_nonzero(~(np.abs(got - exp) <= tol * np.abs(exp))))  # NaN counts wrong
    return wrong
