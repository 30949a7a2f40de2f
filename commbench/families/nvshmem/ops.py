"""The nvshmem family's op table: one row per op. Planning, set-up, run, check and traffic read
the row; nothing else branches on an op's name.

A row names the native entry each initiator calls ("device": backend ``nvshmem``, kernels
calling the NVSHMEM device API; "host": backend ``nvshmem_host``, the on-stream host API).
Adding an op: a row here, plus one line per new entry in ``p2p.CALLS`` / ``p2p.LOOPS`` /
``coll.CALLS`` (and its kernel in kernels/nvshmem_ops.cu or nvshmem_coll.cu).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ... import metrics
from ...dtypes import BYTES as ELEM_BYTES
from ..base import Case, Traffic
from . import coll, p2p

P2P, COLL = "p2p", "coll"
DATA_DTYPES = ("float32", "bfloat16", "float16", "int32")
WORD_DTYPES = ("uint64",)
DTYPE_RULE = "atomic_fetch_add runs on uint64 words, and uint64 is only for atomics"
COLL_READS = ("threads", "allow_limited_mpg")


# --- bytes for algbw (busbw = algbw x bus factor) -------------------------------------------------
def streamed(op: "Op", case: Case, prm: dict, world_size: int) -> Traffic:
    """Every transfer of a launch counts: ``reps`` of them when the op reads it, both ways for ``bi``."""
    reps = prm["reps"] if "reps" in op.reads else 1
    both = 2 if prm["direction"] == "bi" and world_size > 1 else 1
    return Traffic(case.size_bytes * reps * both, 1.0)


def one_message(op: "Op", case: Case, prm: dict, world_size: int) -> Traffic:
    return Traffic(case.size_bytes, 1.0)


def round_trip(op: "Op", case: Case, prm: dict, world_size: int) -> Traffic:
    """One sample is a round trip: the message moves twice."""
    return Traffic(2 * case.size_bytes, 1.0)


def collective(op: "Op", case: Case, prm: dict, world_size: int) -> Traffic:
    """nccl-tests' formulas (docs/metrics.md), so rows overlay NCCL's."""
    elem = ELEM_BYTES[case.dtype]
    count = metrics.element_count(op.name, case.size_bytes, elem, world_size)
    return Traffic(metrics.algbw_bytes(op.name, count, elem, world_size), metrics.bus_factor(op.name, world_size))


@dataclass(frozen=True, eq=False)
class Op:
    name: str
    entries: dict[str, str]        # initiator ("device" / "host") -> the native entry it calls
    reads: tuple[str, ...]         # the family params the op reads
    check: Callable[..., int]      # wrong elements on this PE, after timing
    traffic: Callable[..., Traffic]
    dtypes: tuple[str, ...] = DATA_DTYPES
    device_only: str = ""          # why there is no host-initiated form (when "host" is not in entries)
    graph_ok: bool = True          # False: its waits or checks count launches, which graph replay breaks

    kind = ""

    def count(self, size_bytes: int, elem_bytes: int, world_size: int) -> int:
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class P2pOp(Op):
    """An op between paired PEs (p with p^1)."""

    traffic: Callable[..., Traffic] = streamed
    receiver: str = "target"       # where the data lands: "target", "initiator" (a get) or "both"
    every_pe: bool = False         # the target enqueues too (it waits for the initiator's signal)
    word_bytes: int = 0            # moves whole words of this many bytes (one message each)
    host_max_bytes: int = 0        # the host form issues one call per word: limited to this
    counters: bool = False         # target words are counters (start 1..n, grow by each add), not data
    in_kernel: bool = False        # times itself: %globaltimer stamps per iteration in one launch
    native: dict[str, str] = field(default_factory=dict)   # initiator -> native-loop kind (native.KINDS)

    kind = P2P
    setup = staticmethod(p2p.setup)
    run = staticmethod(p2p.run)

    @property
    def is_get(self) -> bool:
        """The initiator reads its peer's buffer (the data lands on the initiator)."""
        return self.receiver == "initiator"

    def count(self, size_bytes: int, elem_bytes: int, world_size: int) -> int:
        return size_bytes // elem_bytes


@dataclass(frozen=True, eq=False)
class CollOp(Op):
    """A collective on NVSHMEM_TEAM_WORLD."""

    entries: dict[str, str] = field(default_factory=lambda: {"device": "cb_coll_device", "host": "cb_coll_host"})
    reads: tuple[str, ...] = COLL_READS
    check: Callable[..., int] = coll.check
    traffic: Callable[..., Traffic] = collective
    code: int = -1                 # the op's code in kernels/nvshmem_coll.cu
    expect: Callable | None = None  # (state, start, stop) -> what this PE's destination holds there
    blocks: tuple[str, ...] = ()   # sides ("in", "out") that hold one block per PE
    device_scratch: bool = False   # the device form stages through NVSHMEM_REDUCE_SCRATCH_SIZE

    kind = COLL
    setup = staticmethod(coll.setup)
    run = staticmethod(coll.run)

    def count(self, size_bytes: int, elem_bytes: int, world_size: int) -> int:
        return metrics.element_count(self.name, size_bytes, elem_bytes, world_size)


def _in_kernel_only(name: str) -> str:
    return f"{name} is an in-kernel loop (device-initiated only); time host put/get instead"


RMA_READS = ("direction", "scope", "nbi", "reps", "num_ctas", "threads", "timed_loop")
_ROWS = (
    P2pOp("put", {"device": "cb_rma_bw", "host": "cb_host_rma"}, RMA_READS, p2p.check_received,
          native={"device": "rma_bw", "host": "host_rma"}),
    P2pOp("get", {"device": "cb_rma_bw", "host": "cb_host_rma"}, RMA_READS, p2p.check_received,
          receiver="initiator", native={"device": "rma_bw", "host": "host_rma"}),
    P2pOp("p", {"device": "cb_p", "host": "cb_host_p"}, ("direction", "reps", "num_ctas", "threads", "timed_loop"),
          p2p.check_received, word_bytes=4, host_max_bytes=4096, native={"device": "p", "host": "host_p"}),
    P2pOp("put_signal", {"device": "cb_put_signal", "host": "cb_host_put_signal"},
          ("direction", "num_ctas", "threads"), p2p.check_signalled, every_pe=True, graph_ok=False),
    P2pOp("atomic_fetch_add", {"device": "cb_fetch_add"}, ("direction", "num_ctas", "threads"), p2p.check_counted,
          dtypes=WORD_DTYPES, word_bytes=8, counters=True, graph_ok=False,
          device_only="NVSHMEM has no host-initiated on-stream atomics"),
    P2pOp("put_latency", {"device": "cb_latency"}, ("direction", "threads"), p2p.check_received,
          traffic=one_message, in_kernel=True, graph_ok=False, device_only=_in_kernel_only("put_latency")),
    P2pOp("get_latency", {"device": "cb_latency"}, ("direction", "threads"), p2p.check_received,
          traffic=one_message, receiver="initiator", in_kernel=True, graph_ok=False,
          device_only=_in_kernel_only("get_latency")),
    P2pOp("pingpong", {"device": "cb_pingpong"}, ("threads",), p2p.check_received, traffic=round_trip,
          receiver="both", every_pe=True, in_kernel=True, graph_ok=False, device_only=_in_kernel_only("pingpong")),
    CollOp("all_reduce", code=0, expect=coll.expect_all_reduce),
    CollOp("all_gather", code=1, expect=coll.expect_all_gather, blocks=("out",)),
    CollOp("alltoall", code=2, expect=coll.expect_alltoall, blocks=("in", "out")),
    CollOp("broadcast", code=3, expect=coll.expect_broadcast),
    CollOp("reduce_scatter", code=4, expect=coll.expect_reduce_scatter, blocks=("in",), device_scratch=True),
)
OPS: dict[str, Op] = {op.name: op for op in _ROWS}
