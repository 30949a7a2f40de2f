"""NVSHMEM: device- and host-initiated put/get/p/signal/atomics, latency loops, collectives.

Backends: ``nvshmem`` = device-initiated (CUDA kernels calling the NVSHMEM
device API, kernels/nvshmem_ops.cu and nvshmem_coll.cu); ``nvshmem_host`` =
host-initiated on-stream API. Transports come from the suite's env
(NVSHMEM_DISABLE_P2P, NVSHMEM_REMOTE_TRANSPORT, NVSHMEM_IB_ENABLE_IBGDA); the
transport that was actually used is a result column. Definitions follow
NVSHMEM perftest (docs/families/nvshmem.md).
"""
from __future__ import annotations

import os

from ... import metrics
from ...dtypes import BYTES as ELEM_BYTES
from ..base import Case, Family, Param, RankContext, Traffic

P2P_OPS = ("put", "get", "p", "put_signal", "atomic_fetch_add", "put_latency", "get_latency", "pingpong")
COLL_OPS = ("all_reduce", "all_gather", "alltoall", "broadcast", "reduce_scatter")
LATENCY_OPS = ("put_latency", "get_latency", "pingpong")


class Nvshmem(Family):
    name = "nvshmem"
    summary = "NVSHMEM point-to-point (device/host initiated), latency, message rate and collectives"
    ops = P2P_OPS + COLL_OPS
    backends = ("nvshmem", "nvshmem_host")
    dtypes = ("float32", "bfloat16", "float16", "int32", "uint64")
    default_dtype = "float32"
    needs_gpu = True
    params = {
        "num_ctas": Param(4, (int,), "CTAs issuing bandwidth / message-rate ops (perftest -c)", range=(1, None)),
        "threads": Param(1024, (int,), "threads per CTA (perftest -t)", range=(1, 1024)),
        "scope": Param("block", (str,), "who issues each put/get: one thread, a warp or a whole CTA",
                       choices=("thread", "warp", "block")),
        "nbi": Param(True, (bool,), "non-blocking put/get (_nbi) then one quiet, or blocking calls"),
        "direction": Param("uni", (str,), "uni: even PEs send to odd PEs; bi: both send",
                           choices=("uni", "bi")),
        "reps": Param(1, (int,), "transfers per kernel launch (perftest's in-kernel loop); bytes count all",
                      range=(1, None)),
        "timed_loop": Param("native", (str,), "enqueue the timed batch of put/get/p/atomic ops from native code "
                            "(Python entered once per batch) or from Python, one call per op",
                            choices=("native", "python")),
        "allow_limited_mpg": Param(False, (bool,), "try collectives when PEs share a GPU without MPS"),
    }

    def _prm(self, case: Case) -> dict:
        return {k: case.param(k, p.default) for k, p in self.params.items()}

    def impossible(self, case: Case) -> tuple[str, str] | None:
        prm, size, op = self._prm(case), case.size_bytes, case.op
        elem = ELEM_BYTES.get(case.dtype, 4)
        if size <= 0 or size % elem:
            return ("sizes", f"size_bytes must be a positive multiple of the {case.dtype} size ({elem} B)")
        if prm["scope"] == "warp" and prm["threads"] % 32:
            return ("params.threads", "warp scope needs threads to be a multiple of 32")
        if (case.dtype == "uint64") != (op == "atomic_fetch_add"):
            return ("dtypes", "atomic_fetch_add runs on uint64 words, and uint64 is only for atomics")
        if op in COLL_OPS:
            if op in ("all_gather", "reduce_scatter", "alltoall") and size % (elem * case.ranks):
                return ("sizes", f"{op}: size_bytes must split evenly over {case.ranks} ranks")
            return None
        if case.ranks > 1 and case.ranks % 2:
            return ("ranks", f"point-to-point ops pair PEs (p with p^1): {case.ranks} ranks is odd")
        if op == "p" and size % 4:
            return ("sizes", "p moves 4-byte words: size_bytes must be a multiple of 4")
        if case.backend == "nvshmem_host":
            if op == "atomic_fetch_add":
                return ("backends", "NVSHMEM has no host-initiated on-stream atomics")
            if op in LATENCY_OPS:
                return ("backends", f"{op} is an in-kernel loop (device-initiated only); time host put/get instead")
            if op == "p" and size > 4096:
                return ("sizes", "host-initiated p issues one call per word: limited to 4 KiB")
        if case.timing == "graph" and op in ("put_signal", "atomic_fetch_add") + LATENCY_OPS:
            return ("timing", f"{op} checks per-launch counters: CUDA-graph replay is not supported")
        return None

    def setup(self, case: Case, ctx: RankContext):
        from ...comm import nvshmem as boot
        from . import coll, p2p

        handle = boot.ensure(ctx)   # refuses unless the launch holds the multicast kill switches
        prm = self._prm(case)
        if case.op in COLL_OPS:
            state = coll.setup(case, ctx, handle, prm)
            probe = state.dst.data_ptr()
        else:
            state = p2p.setup(case, ctx, handle, prm)
            probe = state.ptrs["b"]
        peers = [pe for pe in range(handle.n_pes) if pe != handle.pe] or [handle.pe]
        all_p2p = all(handle.is_p2p(probe, pe) for pe in peers)
        all_p2p = all(ctx.world.allgather(all_p2p))
        transport = boot.transport_label(os.environ, all_p2p)
        state.extra.update(transport=transport, nvshmem_version=boot.metadata()["nvshmem"],
                           nvshmem_mode=handle.status_name,
                           variant=case.variant if transport in case.variant else f"{case.variant}+{transport}")
        state.size_bytes, state.count = case.size_bytes, self._count(case, ctx.world.size)
        if case.op in LATENCY_OPS:  # timed in the kernel (global timer stamps per iteration)
            state.measure = lambda warmup, iters: p2p.measure_latency(state, warmup, iters)
        return state

    def _count(self, case: Case, world_size: int) -> int:
        elem = ELEM_BYTES[case.dtype]
        if case.op in COLL_OPS:
            return metrics.element_count(case.op, case.size_bytes, elem, world_size)
        return case.size_bytes // elem

    def run(self, state) -> None:
        from . import coll, p2p

        (coll.run if state.op in COLL_OPS else p2p.run)(state)

    def check(self, state) -> int:
        from . import coll, p2p

        return (coll.check if state.op in COLL_OPS else p2p.check)(state)

    def traffic(self, case: Case, world_size: int) -> Traffic:
        prm, size = self._prm(case), case.size_bytes
        if case.op in COLL_OPS:
            elem = ELEM_BYTES[case.dtype]
            count = metrics.element_count(case.op, size, elem, world_size)
            return Traffic(metrics.algbw_bytes(case.op, count, elem, world_size),
                           metrics.bus_factor(case.op, world_size))
        if case.op in ("put_latency", "get_latency"):
            return Traffic(size, 1.0)
        if case.op == "pingpong":  # one round trip moves the message twice
            return Traffic(2 * size, 1.0)
        reps = prm["reps"] if case.op in ("put", "get", "p") else 1
        both = 2 if prm["direction"] == "bi" and world_size > 1 else 1
        return Traffic(size * reps * both, 1.0)

    def teardown(self, state) -> None:
        # Symmetric buffers stay in the launch's pool (boot.NvshmemHandle.buffer), freed at finalize.
        state.stream.synchronize()


FAMILY = Nvshmem()
