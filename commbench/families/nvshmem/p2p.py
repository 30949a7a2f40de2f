"""Point-to-point NVSHMEM ops: state, enqueue, check, and in-kernel latency loops.

Pairing (perftest's 2-PE layout, generalised): with one PE it talks to itself
(loopback); otherwise PE p pairs with p^1. ``uni``: even PEs initiate, odd
PEs are targets; ``bi``: both initiate. For ``get`` the initiator reads its
peer's source buffer; for every other op it writes the peer's destination.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ...measure.state import CaseState
from ...errors import SkipCase
from . import buffers

SCOPES = {"thread": 0, "warp": 1, "block": 2}
LATENCY_OPS = ("put_latency", "get_latency", "pingpong")
TIMEOUT_NS = 10_000_000_000


@dataclass
class P2PState(CaseState):
    case: object
    handle: object
    lib: object
    world: object
    device: str
    op: str
    backend: str
    dtype: str
    peer: int
    initiator: bool
    target: bool
    prm: dict
    ptrs: dict
    stamps: object = None
    err: object = None
    host_words: object = None
    launches: int = 0
    sig_base: int = 0


def pairing(pe: int, n_pes: int, direction: str) -> tuple[int, bool, bool]:
    """(peer, initiates, is_target) for this PE."""
    if n_pes == 1:
        return 0, True, True
    peer = pe ^ 1
    if direction == "bi":
        return peer, True, True
    return peer, pe % 2 == 0, pe % 2 == 1


def signals_per_launch(size_bytes: int, num_ctas: int, backend: str) -> int:
    """How many signal adds one put_signal launch delivers (blocks that own bytes)."""
    if backend == "nvshmem_host":
        return 1
    chunk = -(-size_bytes // num_ctas)
    chunk = -(-chunk // 16) * 16
    return -(-size_bytes // chunk)


def _declare(lib) -> None:
    vp, i, sz, u64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64
    lib.cb_rma_bw.argtypes = [vp, vp, sz, i, i, i, i, i, i, i, vp]
    lib.cb_p.argtypes = [vp, vp, sz, i, i, i, i, vp]
    lib.cb_fetch_add.argtypes = [vp, vp, sz, u64, i, i, i, vp]
    lib.cb_put_signal.argtypes = [vp, vp, sz, vp, i, i, u64, u64, vp, i, i, vp]
    lib.cb_latency.argtypes = [vp, vp, sz, i, i, i, vp, i, vp]
    lib.cb_pingpong.argtypes = [vp, vp, sz, vp, i, i, i, u64, vp, u64, vp, i, vp]
    lib.cb_host_rma.argtypes = [vp, vp, sz, i, i, i, vp]
    lib.cb_host_p.argtypes = [vp, vp, sz, i, vp]
    lib.cb_host_put_signal.argtypes = [vp, vp, sz, vp, i, i, u64, vp]


def setup(case, ctx, handle, prm: dict) -> P2PState:
    import torch

    if handle.limited_mpg and case.backend == "nvshmem_host" and case.op == "put_signal":
        # NVSHMEM exits the process here (host/comm/sync.cpp), so this must not be tried.
        raise SkipCase("host-initiated put_signal waits with nvshmemx_signal_wait_until_on_stream, "
                       "which NVSHMEM refuses (and exits) under limited MPG (several PEs on one "
                       "GPU without MPS); run one PE per GPU")
    lib = handle.load("nvshmem_ops", "cb_ops_attach")
    _declare(lib)
    pe, n = handle.pe, handle.n_pes
    if n > 1 and n % 2:
        raise SkipCase(f"point-to-point ops pair PEs: {n} PEs is odd")
    peer, initiator, target = pairing(pe, n, prm["direction"])
    size = case.size_bytes
    ptrs = {k: handle.buffer(k, size) for k in ("a", "b", "c")}
    ptrs["sig"] = handle.buffer("sig", 64)
    stream = torch.cuda.Stream(device=ctx.device)
    dtype = case.dtype
    count = size // buffers.ELEM_BYTES[dtype]
    st = P2PState(case, handle, lib, ctx.world, ctx.device, case.op, case.backend, dtype, peer, initiator,
                  target, prm, ptrs, stream=stream, size_bytes=size, count=count)
    with torch.cuda.stream(stream):
        src = buffers.view(ptrs["a"], size, dtype, ctx.device)
        if case.op == "atomic_fetch_add":
            src.copy_(torch.arange(1, count + 1, device=ctx.device, dtype=torch.int64))
        else:
            src.copy_(buffers.p2p_values(pe, count, dtype, ctx.device))
        buffers.view(ptrs["b"], size, "int32" if size % 4 == 0 else "bfloat16", ctx.device).zero_()
        if case.op == "atomic_fetch_add":
            buffers.view(ptrs["b"], size, dtype, ctx.device).copy_(src)
        buffers.view(ptrs["c"], size, "bfloat16" if size % 4 else "int32", ctx.device).zero_()
        buffers.view(ptrs["sig"], 64, "uint64", ctx.device).zero_()
        st.err = torch.zeros(1, dtype=torch.int32, device=ctx.device)
        st.stamps = torch.zeros(case.warmup + case.iters + 1, dtype=torch.int64, device=ctx.device)
    if case.op == "p" and case.backend == "nvshmem_host":
        st.host_words = buffers.view(ptrs["a"], size, "int32", ctx.device).cpu().numpy().astype("uint32")
    stream.synchronize()
    ctx.world.barrier()  # no peer may write into our buffers before they are reset
    st.extra = {"msgs_per_op": msgs_per_op(case.op, size, prm), "peer": peer}
    if case.param("timed_loop", "native") == "native":
        from .native import native_op

        st.native = native_op(st)
    return st


def msgs_per_op(op: str, size_bytes: int, prm: dict) -> int:
    """Messages one enqueued op sends per initiating PE (message rate = this / time)."""
    reps = prm["reps"]
    if op == "p":
        return size_bytes // 4 * reps
    if op == "atomic_fetch_add":
        return size_bytes // 8
    if op in ("put", "get"):
        units = {"block": 1, "warp": prm["threads"] // 32, "thread": prm["threads"]}[prm["scope"]]
        return min(prm["num_ctas"] * units, max(1, size_bytes // 16)) * reps
    return 1


def run(st: P2PState) -> None:
    import torch

    # The runner makes the timing stream current (a capture stream in graph mode).
    p, s = st.prm, torch.cuda.current_stream().cuda_stream
    a, b, c, sig = st.ptrs["a"], st.ptrs["b"], st.ptrs["c"], st.ptrs["sig"]
    st.launches += 1
    if st.op == "put_signal":
        per = signals_per_launch(st.size_bytes, p["num_ctas"], st.backend)
        expect = st.launches * per if st.target else 0
        if st.backend == "nvshmem_host":
            rc = st.lib.cb_host_put_signal(b, a, st.size_bytes, sig, st.peer, int(st.initiator), expect, s)
        else:
            rc = st.lib.cb_put_signal(b, a, st.size_bytes, sig, st.peer, int(st.initiator), expect,
                                      TIMEOUT_NS, st.err.data_ptr(), p["num_ctas"], p["threads"], s)
        _ok(rc, st.op)
        return
    if not st.initiator:
        return
    if st.op in ("put", "get"):
        is_get = int(st.op == "get")
        if st.backend == "nvshmem_host":
            rc = st.lib.cb_host_rma(b, a, st.size_bytes, st.peer, int(p["nbi"]), is_get, s)
        else:
            rc = st.lib.cb_rma_bw(b, a, st.size_bytes, st.peer, SCOPES[p["scope"]], int(p["nbi"]),
                                  is_get, p["reps"], p["num_ctas"], p["threads"], s)
    elif st.op == "p":
        if st.backend == "nvshmem_host":
            rc = st.lib.cb_host_p(b, st.host_words.ctypes.data, st.size_bytes // 4, st.peer, s)
        else:
            rc = st.lib.cb_p(b, a, st.size_bytes // 4, st.peer, p["reps"], p["num_ctas"], p["threads"], s)
    elif st.op == "atomic_fetch_add":
        rc = st.lib.cb_fetch_add(b, c, st.size_bytes // 8, st.handle.pe + 1, st.peer, p["num_ctas"],
                                 p["threads"], s)
    else:
        raise ValueError(f"{st.op} is measured in-kernel, not enqueued")
    _ok(rc, st.op)


def _ok(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what}: CUDA/NVSHMEM error {rc} at launch")


def measure_latency(st: P2PState, warmup: int, iters: int) -> list[float]:
    """Per-iteration microseconds from the kernel's global-timer stamps."""
    total = warmup + iters
    if st.stamps.numel() < total + 1:
        import torch

        st.stamps = torch.zeros(total + 1, dtype=torch.int64, device=st.device)
    st.stream.synchronize()
    st.world.barrier()
    a, b, sig, s = st.ptrs["a"], st.ptrs["b"], st.ptrs["sig"], st.stream.cuda_stream
    threads = min(st.prm["threads"], 1024)
    if st.op == "pingpong":
        rc = st.lib.cb_pingpong(b, a, st.size_bytes, sig, st.peer, int(st.handle.pe % 2 == 0), total,
                                st.sig_base, st.stamps.data_ptr(), TIMEOUT_NS, st.err.data_ptr(), threads, s)
        st.sig_base += total
    elif st.initiator:
        rc = st.lib.cb_latency(b, a, st.size_bytes, st.peer, int(st.op == "get_latency"), total,
                               st.stamps.data_ptr(), threads, s)
    else:
        return [0.0] * iters  # the passive PE of a one-way latency test issues nothing
    _ok(rc, st.op)
    st.stream.synchronize()
    if int(st.err.item()):
        raise RuntimeError(f"{st.op}: timed out waiting for PE {st.peer}'s signal")
    t = st.stamps[: total + 1].cpu().tolist()
    st.timing_label = "kernel_globaltimer"
    return [(t[i + 1] - t[i]) / 1e3 for i in range(warmup, total)]


def check(st: P2PState) -> int:
    """Wrong elements on this PE: what the peer put here (or what we got from it) is verified."""
    import torch

    torch.cuda.synchronize()
    st.world.barrier()  # every initiator's kernels (and their quiet) have finished
    wrong = 0
    if st.op == "put_signal" and st.target:
        per = signals_per_launch(st.size_bytes, st.prm["num_ctas"], st.backend)
        got = int(buffers.view(st.ptrs["sig"], 8, "uint64", st.device).item())
        wrong += int(got != st.launches * per) + int(st.err.item())
    if st.op == "atomic_fetch_add":
        base = torch.arange(1, st.count + 1, device=st.device, dtype=torch.int64)
        if st.target:  # our words got one add of (peer+1) per launch of the peer
            want = base + st.launches * (st.peer + 1)
            wrong += buffers.count_mismatch(buffers.view(st.ptrs["b"], st.size_bytes, "uint64", st.device), want)
        if st.initiator:  # the last fetch saw all earlier adds of ours
            want = base + (st.launches - 1) * (st.handle.pe + 1)
            wrong += buffers.count_mismatch(buffers.view(st.ptrs["c"], st.size_bytes, "uint64", st.device), want)
        return wrong
    receives = st.initiator if st.op in ("get", "get_latency") else st.target
    if st.op == "pingpong":
        receives = True
    if receives:
        want = buffers.p2p_values(st.peer, st.count, st.dtype, st.device)
        wrong += buffers.count_mismatch(buffers.view(st.ptrs["b"], st.size_bytes, st.dtype, st.device), want)
    return wrong
