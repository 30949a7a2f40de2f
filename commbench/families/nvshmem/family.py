"""NVSHMEM: device- and host-initiated put/get/p/signal/atomics, latency loops, collectives.

Backends: ``nvshmem`` = device-initiated (CUDA kernels calling the NVSHMEM
device API, kernels/nvshmem_ops.cu and nvshmem_coll.cu); ``nvshmem_host`` =
host-initiated on-stream API. Every op is one row of ``ops.OPS``, which this class
reads. Transports come from the suite's env (NVSHMEM_DISABLE_P2P,
NVSHMEM_REMOTE_TRANSPORT, NVSHMEM_IB_ENABLE_IBGDA); the transport that was
actually used is a result column. Definitions follow NVSHMEM perftest
(docs/families/nvshmem.md).
"""
from __future__ import annotations

import os

from ...comm import nvshmem as shmem
from ...dtypes import BYTES as ELEM_BYTES
from ...comm.context import RankContext
from ...errors import SkipCase
from ..base import Case, Family, Param, Traffic
from .ops import COLL, DTYPE_RULE, OPS
from .state import INITIATORS
MAX_CTAS = 4096      # about 30 CTAs per SM of the largest GPUs; the kernels take a C int
MAX_REPS = 100_000   # transfers in one launch: the launch must finish within the Case's timeout


class Nvshmem(Family):
    name = "nvshmem"
    summary = "NVSHMEM point-to-point (device/host initiated), latency, message rate and collectives"
    ops = tuple(OPS)
    backends = ("nvshmem", "nvshmem_host")
    dtypes = ("float32", "bfloat16", "float16", "int32", "uint64")
    default_dtype = "float32"
    needs_gpu = True
    params = {
        "num_ctas": Param(4, (int,), "CTAs issuing bandwidth / message-rate ops (perftest -c)",
                          range=(1, MAX_CTAS)),
        "threads": Param(1024, (int,), "threads per CTA (perftest -t)", range=(1, 1024)),
        "scope": Param("block", (str,), "who issues each put/get: one thread, a warp or a whole CTA",
                       choices=("thread", "warp", "block")),
        "nbi": Param(True, (bool,), "non-blocking put/get (_nbi) then one quiet, or blocking calls"),
        "direction": Param("uni", (str,), "uni: even PEs send to odd PEs; bi: both send",
                           choices=("uni", "bi")),
        "reps": Param(1, (int,), "transfers per kernel launch (perftest's in-kernel loop); bytes count all",
                      range=(1, MAX_REPS)),
        "timed_loop": Param("native", (str,), "enqueue the timed batch of put/get/p/atomic ops from native code "
                            "(Python entered once per batch) or from Python, one call per op",
                            choices=("native", "python")),
        "allow_limited_mpg": Param(False, (bool,), "try collectives when PEs share a GPU without MPS"),
    }

    def _prm(self, case: Case) -> dict:
        return {k: case.param(k, p.default) for k, p in self.params.items()}

    def impossible(self, case: Case) -> tuple[str, str] | None:
        prm, size, op = self._prm(case), case.size_bytes, OPS[case.op]
        elem = ELEM_BYTES.get(case.dtype, 4)
        if size <= 0 or size % elem:
            return ("sizes", f"size_bytes must be a positive multiple of the {case.dtype} size ({elem} B)")
        if prm["scope"] == "warp" and prm["threads"] % 32:
            return ("params.threads", "warp scope needs threads to be a multiple of 32")
        if case.dtype not in op.dtypes:
            return ("dtypes", DTYPE_RULE)
        if op.kind == COLL:
            if op.blocks and size % (elem * case.ranks):
                return ("sizes", f"{op.name}: size_bytes must split evenly over {case.ranks} ranks")
            return None
        if case.ranks > 1 and case.ranks % 2:
            return ("ranks", f"point-to-point ops pair PEs (p with p^1): {case.ranks} ranks is odd")
        if op.word_bytes and size % op.word_bytes:
            return ("sizes", f"{op.name} moves {op.word_bytes}-byte words: size_bytes must be a multiple "
                             f"of {op.word_bytes}")
        if INITIATORS[case.backend] == "host":
            if "host" not in op.entries:
                return ("backends", op.device_only)
            if op.host_max_bytes and size > op.host_max_bytes:
                return ("sizes", f"host-initiated {op.name} issues one call per word: limited to "
                                 f"{op.host_max_bytes // 1024} KiB")
        if case.timing == "graph" and not op.graph_ok:
            return ("timing", f"{op.name} checks per-launch counters: CUDA-graph replay is not supported")
        return None

    def machine_reason(self, case: Case) -> str | None:
        # The heap's limit is in the launch's environment (NVSHMEM reads it once, at start-up): a
        # Case whose own buffers exceed it is skipped before launch, not failed in nvshmem_malloc.
        from .memory import heap_reason, symmetric_buffers

        return heap_reason(symmetric_buffers(case, case.ranks), _launch_env(case))

    def memory_bytes(self, case: Case, world_size: int):
        """This PE's symmetric buffers and the pattern's chunk (memory.py), held against the free
        memory: the heap grows from it."""
        from .memory import nvshmem_plan

        return nvshmem_plan(case, world_size, _launch_env(case))

    def setup(self, case: Case, ctx: RankContext):
        from .memory import heap_reason, symmetric_buffers

        handle = shmem.ensure(ctx)   # refuses unless the launch holds the multicast kill switches
        op = OPS[case.op]
        # the pool keeps earlier Cases' buffers: skipped here, before any nvshmem_malloc, when they
        # and this Case's together pass the heap's limit (the same on every PE: no PE allocates)
        held = {name: size for name, (_ptr, size) in handle.buffers.items()}
        reason = heap_reason(symmetric_buffers(case, handle.n_pes), os.environ, held)
        if reason:
            raise SkipCase(reason)
        state = op.setup(case, ctx, handle, self._prm(case), op)
        peers = [pe for pe in range(handle.n_pes) if pe != handle.pe] or [handle.pe]
        all_p2p = all(handle.is_p2p(state.probe, pe) for pe in peers)
        all_p2p = all(ctx.world.allgather(all_p2p))
        transport = shmem.transport_label(os.environ, all_p2p)
        state.extra.update(transport=transport, nvshmem_version=shmem.metadata()["nvshmem"],
                           nvshmem_mode=handle.status_name,
                           variant=case.variant if transport in case.variant else f"{case.variant}+{transport}")
        state.size_bytes = case.size_bytes
        state.count = op.count(case.size_bytes, ELEM_BYTES[case.dtype], ctx.world.size)
        return state

    def run(self, state) -> None:
        state.op.run(state)

    def check(self, state) -> int:
        return state.op.check(state)

    def traffic(self, case: Case, world_size: int) -> Traffic:
        op = OPS[case.op]
        return op.traffic(op, case, self._prm(case), world_size)

    def teardown(self, state) -> None:
        # Symmetric buffers stay in the launch's pool (comm.nvshmem.NvshmemHandle.buffer), freed at finalize.
        state.stream.synchronize()


def _launch_env(case: Case) -> dict[str, str]:
    """The environment NVSHMEM starts with in this Case's launch: this process's (a rank's is the
    launch's), the Case's variant over it."""
    return {**os.environ, **case.env_dict}


FAMILY = Nvshmem()
