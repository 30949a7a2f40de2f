"""The nvshmem family's per-Case state, in small declared pieces: who this PE is, whom it pairs
with, its symmetric buffers, and the counters in-kernel waits and checks rely on."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...measure.state import CaseState

INITIATORS = {"nvshmem": "device", "nvshmem_host": "host"}   # backend -> who initiates the op
BACKENDS = {who: backend for backend, who in INITIATORS.items()}
SCOPES = {"thread": 0, "warp": 1, "block": 2}   # who issues each put/get (kernels/nvshmem_ops.cu)


@dataclass(frozen=True)
class Pe:
    """This PE in the launch's NVSHMEM: the handle (pe, n_pes, symmetric pool), the op's kernels
    library, the MPI world (control plane) and the GPU."""

    handle: Any
    lib: Any
    world: Any
    device: str


@dataclass(frozen=True)
class Pairing:
    """Whom a point-to-point PE talks to: ``initiates`` issues the op, ``target`` is written to."""

    peer: int
    initiates: bool
    target: bool


@dataclass(frozen=True)
class Buffers:
    """Symmetric addresses: ``a`` source, ``b`` destination (the atomics' target words), ``c`` the
    values atomics fetch, ``sig`` the signal words."""

    a: int
    b: int
    c: int
    sig: int


@dataclass
class Progress:
    """What waits and checks count on: launches enqueued, the next ping-pong's signal base, and
    device tensors for the wait-timeout flag and the in-kernel timer stamps."""

    launches: int = 0
    sig_base: int = 0
    err: Any = None
    stamps: Any = None


@dataclass(kw_only=True)
class P2PState(CaseState):
    op: Any            # its row, ops.P2pOp
    initiator: str     # "device" or "host"
    pe: Pe
    pair: Pairing
    bufs: Buffers
    dtype: str
    prm: dict
    progress: Progress = field(default_factory=Progress)
    host_words: Any = None   # the source as host uint32 words (host-initiated p reads them there)

    @property
    def probe(self) -> int:
        """An address peers access: the transport is named from whether they reach it by p2p."""
        return self.bufs.b


@dataclass(kw_only=True)
class CollState(CaseState):
    op: Any            # its row, ops.CollOp
    initiator: str
    pe: Pe
    dtype: str
    nvshmem_count: int   # elements per NVSHMEM call (per-PE block for gather/alltoall/scatter)
    src: Any
    dst: Any
    threads: int

    @property
    def probe(self) -> int:
        return self.dst.data_ptr()
