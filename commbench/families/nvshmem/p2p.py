"""Point-to-point NVSHMEM ops: set-up, one launch per native entry, in-kernel latency loops, checks.

Pairing (perftest's 2-PE layout, generalised): with one PE it talks to itself
(loopback); otherwise PE p pairs with p^1. ``uni``: even PEs initiate, odd
PEs are targets; ``bi``: both initiate. What differs between ops is their row
in ``ops.py``; ``CALLS`` and ``LOOPS`` hold one line per native entry.
"""
from __future__ import annotations

import ctypes

from ... import dtypes
from ...errors import SkipCase
from . import buffers
from .state import INITIATORS, SCOPES, Buffers, P2PState, Pairing, Pe

TIMEOUT_NS = 10_000_000_000
# Native entries NVSHMEM refuses under limited MPG (several PEs on one GPU without MPS) by exiting
# the process (host/comm/sync.cpp), so they must not be tried there.
LIMITED_MPG_REFUSES = {
    "cb_host_put_signal": "host-initiated put_signal waits with nvshmemx_signal_wait_until_on_stream, "
                          "which NVSHMEM refuses (and exits) under limited MPG (several PEs on one "
                          "GPU without MPS); run one PE per GPU",
}
HOST_VALUES = ("cb_host_p",)   # entries that read the source values from host memory


def pairing(pe: int, n_pes: int, direction: str) -> tuple[int, bool, bool]:
    """(peer, initiates, is_target) for this PE."""
    if n_pes == 1:
        return 0, True, True
    peer = pe ^ 1
    if direction == "bi":
        return peer, True, True
    return peer, pe % 2 == 0, pe % 2 == 1


def signals_per_launch(size_bytes: int, num_ctas: int, initiator: str) -> int:
    """How many signal adds one put_signal launch delivers (blocks that own bytes)."""
    if initiator == "host":
        return 1
    chunk = -(-size_bytes // num_ctas)
    chunk = -(-chunk // 16) * 16
    return -(-size_bytes // chunk)


def msgs_per_op(op, size_bytes: int, prm: dict) -> int:
    """Messages one enqueued op sends per initiating PE (message rate = this / time)."""
    reps = prm["reps"] if "reps" in op.reads else 1
    if op.word_bytes:   # one message per word
        return size_bytes // op.word_bytes * reps
    if "scope" in op.reads:   # one message per issuing thread / warp / CTA and chunk
        units = {"block": 1, "warp": prm["threads"] // 32, "thread": prm["threads"]}[prm["scope"]]
        return min(prm["num_ctas"] * units, max(1, size_bytes // 16)) * reps
    return 1


# --- one launch per native entry (kernels/nvshmem_ops.cu); s is the CUDA stream -----------------
def _rma_bw(st: P2PState, s) -> int:
    p, b = st.prm, st.bufs
    return st.pe.lib.cb_rma_bw(b.b, b.a, st.size_bytes, st.pair.peer, SCOPES[p["scope"]], int(p["nbi"]),
                               int(st.op.is_get), p["reps"], p["num_ctas"], p["threads"], s)


def _host_rma(st: P2PState, s) -> int:
    b = st.bufs
    return st.pe.lib.cb_host_rma(b.b, b.a, st.size_bytes, st.pair.peer, int(st.prm["nbi"]), int(st.op.is_get), s)


def _p(st: P2PState, s) -> int:
    p, b = st.prm, st.bufs
    return st.pe.lib.cb_p(b.b, b.a, st.size_bytes // 4, st.pair.peer, p["reps"], p["num_ctas"], p["threads"], s)


def _host_p(st: P2PState, s) -> int:
    return st.pe.lib.cb_host_p(st.bufs.b, st.host_words.ctypes.data, st.size_bytes // 4, st.pair.peer, s)


def _fetch_add(st: P2PState, s) -> int:
    p, b = st.prm, st.bufs
    return st.pe.lib.cb_fetch_add(b.b, b.c, st.size_bytes // 8, st.pe.handle.pe + 1, st.pair.peer,
                                  p["num_ctas"], p["threads"], s)


def _expected_signals(st: P2PState) -> int:
    per = signals_per_launch(st.size_bytes, st.prm["num_ctas"], st.initiator)
    return st.progress.launches * per if st.pair.target else 0


def _put_signal(st: P2PState, s) -> int:
    p, b = st.prm, st.bufs
    return st.pe.lib.cb_put_signal(b.b, b.a, st.size_bytes, b.sig, st.pair.peer, int(st.pair.initiates),
                                   _expected_signals(st), TIMEOUT_NS, st.progress.err.data_ptr(),
                                   p["num_ctas"], p["threads"], s)


def _host_put_signal(st: P2PState, s) -> int:
    b = st.bufs
    return st.pe.lib.cb_host_put_signal(b.b, b.a, st.size_bytes, b.sig, st.pair.peer, int(st.pair.initiates),
                                        _expected_signals(st), s)


CALLS = {"cb_rma_bw": _rma_bw, "cb_host_rma": _host_rma, "cb_p": _p, "cb_host_p": _host_p,
         "cb_fetch_add": _fetch_add, "cb_put_signal": _put_signal, "cb_host_put_signal": _host_put_signal}


def _latency(st: P2PState, total: int, s) -> int:
    b = st.bufs
    return st.pe.lib.cb_latency(b.b, b.a, st.size_bytes, st.pair.peer, int(st.op.is_get), total,
                                st.progress.stamps.data_ptr(), min(st.prm["threads"], 1024), s)


def _pingpong(st: P2PState, total: int, s) -> int:
    b, prog = st.bufs, st.progress
    rc = st.pe.lib.cb_pingpong(b.b, b.a, st.size_bytes, b.sig, st.pair.peer, int(st.pe.handle.pe % 2 == 0),
                               total, prog.sig_base, prog.stamps.data_ptr(), TIMEOUT_NS, prog.err.data_ptr(),
                               min(st.prm["threads"], 1024), s)
    prog.sig_base += total
    return rc


LOOPS = {"cb_latency": _latency, "cb_pingpong": _pingpong}   # in-kernel timed loops


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


def setup(case, ctx, handle, prm: dict, op) -> P2PState:
    import torch

    initiator = INITIATORS[case.backend]
    entry = op.entries[initiator]
    if handle.limited_mpg and entry in LIMITED_MPG_REFUSES:
        raise SkipCase(LIMITED_MPG_REFUSES[entry])
    lib = handle.load("nvshmem_ops", "cb_ops_attach")
    _declare(lib)
    pe, n = handle.pe, handle.n_pes
    if n > 1 and n % 2:
        raise SkipCase(f"point-to-point ops pair PEs: {n} PEs is odd")
    pair = Pairing(*pairing(pe, n, prm["direction"]))
    size, dtype, dev = case.size_bytes, case.dtype, ctx.device
    bufs = Buffers(*(handle.buffer(k, size) for k in ("a", "b", "c")), sig=handle.buffer("sig", 64))
    stream = torch.cuda.Stream(device=dev)
    count = size // dtypes.size_bytes(dtype)
    st = P2PState(op=op, initiator=initiator, pe=Pe(handle, lib, ctx.world, dev), pair=pair, bufs=bufs,
                  dtype=dtype, prm=prm, stream=stream, size_bytes=size, count=count)
    with torch.cuda.stream(stream):
        src = buffers.view(bufs.a, size, dtype, dev)
        if op.counters:   # target words start at 1..n and count the adds
            buffers.fill(src, lambda a, b: buffers.counter_chunk(a, b, dev))
        else:
            buffers.fill(src, lambda a, b: buffers.p2p_chunk(pe, a, b, dtype, dev))
        buffers.view(bufs.b, size, "int32" if size % 4 == 0 else "bfloat16", dev).zero_()
        if op.counters:
            buffers.view(bufs.b, size, dtype, dev).copy_(src)
        buffers.view(bufs.c, size, "bfloat16" if size % 4 else "int32", dev).zero_()
        buffers.view(bufs.sig, 64, "uint64", dev).zero_()
        st.progress.err = torch.zeros(1, dtype=torch.int32, device=dev)
        st.progress.stamps = torch.zeros(case.warmup + case.iters + 1, dtype=torch.int64, device=dev)
    if entry in HOST_VALUES:
        st.host_words = buffers.view(bufs.a, size, "int32", dev).cpu().numpy().astype("uint32")
    stream.synchronize()
    ctx.world.barrier()  # no peer may write into our buffers before they are reset
    st.extra = {"msgs_per_op": msgs_per_op(op, size, prm), "peer": pair.peer}
    if op.in_kernel:  # timed in the kernel (global timer stamps per iteration)
        st.measure = lambda warmup, iters: measure_latency(st, warmup, iters)
    elif case.param("timed_loop", "native") == "native":
        from .native import native_op

        st.native = native_op(st)
    return st


def _issues(st: P2PState) -> bool:
    return st.pair.initiates or st.op.every_pe


def run(st: P2PState) -> None:
    import torch

    # The runner makes the timing stream current (a capture stream in graph mode).
    s = torch.cuda.current_stream().cuda_stream
    st.progress.launches += 1
    if st.op.in_kernel:
        raise ValueError(f"{st.op.name} is measured in-kernel, not enqueued")
    if _issues(st):
        _ok(CALLS[st.op.entries[st.initiator]](st, s), st.op.name)


def _ok(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what}: CUDA/NVSHMEM error {rc} at launch")


def measure_latency(st: P2PState, warmup: int, iters: int) -> list[float]:
    """Per-iteration microseconds from the kernel's global-timer stamps."""
    total, prog = warmup + iters, st.progress
    if prog.stamps.numel() < total + 1:
        import torch

        prog.stamps = torch.zeros(total + 1, dtype=torch.int64, device=st.pe.device)
    st.stream.synchronize()
    st.pe.world.barrier()
    if not _issues(st):
        return [0.0] * iters  # the passive PE of a one-way latency test issues nothing
    _ok(LOOPS[st.op.entries[st.initiator]](st, total, st.stream.cuda_stream), st.op.name)
    st.stream.synchronize()
    if int(prog.err.item()):
        raise RuntimeError(f"{st.op.name}: timed out waiting for PE {st.pair.peer}'s signal")
    t = prog.stamps[: total + 1].cpu().tolist()
    st.timing_label = "kernel_globaltimer"
    return [(t[i + 1] - t[i]) / 1e3 for i in range(warmup, total)]


# --- checks (a row names one); each waits for every initiator first ------------------------------
def _settle(st: P2PState) -> None:
    import torch

    torch.cuda.synchronize()
    st.pe.world.barrier()  # every initiator's kernels (and their quiet) have finished


def _received(st: P2PState) -> int:
    receives = {"target": st.pair.target, "initiator": st.pair.initiates, "both": True}[st.op.receiver]
    if not receives:
        return 0
    dev, peer, dtype = st.pe.device, st.pair.peer, st.dtype
    got = buffers.view(st.bufs.b, st.size_bytes, dtype, dev)
    return buffers.count_exact(got, lambda a, b: buffers.p2p_chunk(peer, a, b, dtype, dev))


def check_received(st: P2PState) -> int:
    """Wrong elements of what the peer put here (or what we got from it)."""
    _settle(st)
    return _received(st)


def check_signalled(st: P2PState) -> int:
    """The data as check_received, plus a target's signal count and timeout flag."""
    _settle(st)
    wrong = 0
    if st.pair.target:
        got = int(buffers.view(st.bufs.sig, 8, "uint64", st.pe.device).item())
        wrong += int(got != _expected_signals(st)) + int(st.progress.err.item())
    return wrong + _received(st)


def check_counted(st: P2PState) -> int:
    """Atomics: target words got one add of (peer+1) per launch of the peer; the last fetch saw
    every earlier add of ours."""
    _settle(st)
    dev, n = st.pe.device, st.progress.launches
    wrong = 0
    if st.pair.target:
        added = n * (st.pair.peer + 1)
        got = buffers.view(st.bufs.b, st.size_bytes, "uint64", dev)
        wrong += buffers.count_exact(got, lambda a, b: buffers.counter_chunk(a, b, dev, added))
    if st.pair.initiates:
        seen = (n - 1) * (st.pe.handle.pe + 1)
        got = buffers.view(st.bufs.c, st.size_bytes, "uint64", dev)
        wrong += buffers.count_exact(got, lambda a, b: buffers.counter_chunk(a, b, dev, seen))
    return wrong
