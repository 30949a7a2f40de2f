"""The device memory of one rank of a MoE layer Case (MoeFamily.memory_bytes), by part.

Counted from the shapes the layer allocates (layer.py, expert_pack.py, layer_peer.py,
layer_nccl.py, symm.py, layer_deepep.py, layer_ref.py), per rank of an EP group of R ranks:

- weights: the rank's L = experts / R experts, w13 [2I, H] and w2 [H, I] in BF16; the fused
  Triton kernel may add a packed copy of w13;
- tokens: the rank's T tokens [T, H] BF16;
- per micro-batch: the expert step's input rows (one per (token, local expert) pair, about T x topk
  on average) and the backend's buffers (peer workspace, packed rows, symmetric buffers, DeepEP's
  NVLink buffer), sized as those modules size them;
- transient, the largest of: building the weights (the hash codes of one expert in int64), one
  expert forward (gate/up output, SwiGLU, output rows), and the check (the dense reference in
  FP32, one expert's weights rebuilt at a time).

What it leaves out: the CUDA context, cuBLAS workspaces and NCCL's own buffers (the runner keeps
a headroom for them), and DeepEP's low-latency buffer, which a launch makes once and which the
free memory the runner reads then already shows as used. UCCL-EP's (made per Case) is estimated.
"""
from __future__ import annotations

from ...measure.memory import MemoryPlan
from .shape import FP8_BLOCK, tokens_for

BF16, F32, I32, I64 = 2, 4, 4, 8
PACKED_ROW_ALIGN = 16      # layer_nccl.ROW_ALIGN_BYTES
DEEPEP_NVL_BYTES = 1 << 30  # layer_deepep.NVL_BUFFER_BYTES


def _micro_tokens(tokens: int, overlap: str) -> list[int]:
    if overlap != "two_batch":
        return [tokens]
    first = -(-tokens // 2)
    return [first, tokens - first]


def _ranks_reached(ranks: int, topk: int) -> float:
    """Expected distinct ranks one token's topk experts fall on (uniform routing)."""
    return ranks * (1.0 - (1.0 - 1.0 / ranks) ** topk) if ranks > 1 else 1.0


class LayerShape:
    """The numbers the layer's buffers are sized by."""

    def __init__(self, case, prm: dict, ranks: int):
        self.R, self.E, self.K = ranks, prm["experts"], prm["topk"]
        self.H, self.I = prm["hidden"], prm["intermediate"]
        self.T = tokens_for(case.size_bytes, self.H)
        self.L = max(1, self.E // ranks)
        self.fp8 = case.dtype == "float8_e4m3"
        self.row_bytes = self.H if self.fp8 else BF16 * self.H
        self.scales = self.H // FP8_BLOCK if self.fp8 else 0
        self.backend, self.overlap, self.gemm = case.backend, prm["overlap"], prm["gemm"]
        self.max_tokens = prm["max_tokens"]

    @property
    def packed_width(self) -> int:
        raw = self.row_bytes + F32 * self.scales + 8 * self.K
        return -(-raw // PACKED_ROW_ALIGN) * PACKED_ROW_ALIGN

    def pairs(self, t: int) -> int:
        """(token, local expert) pairs this rank's experts receive from all ranks' t tokens."""
        return t * self.K


def peer_bytes(s: LayerShape, t: int, ll: bool, max_tokens: int) -> int:
    """PeerState's workspace (peer.workspace_sizes) and inputs for one micro-batch of t tokens."""
    R, L, K, H = s.R, s.L, s.K, s.H
    if not ll:
        rows = R * t
        ws = rows * (8 + 8 * K + s.row_bytes + F32 * s.scales + BF16 * H) + 16 * R * (1 + L)
    else:
        slots = L * R * max_tokens
        ws = (slots * (4 + s.row_bytes + F32 * s.scales + BF16 * H) + BF16 * max_tokens * K * H
              + 8 * max_tokens * K + 12 * L * R + 8 * s.E)
        if s.backend == "nvshmem_ll":   # staged inputs in the symmetric heap
            ws += t * (s.row_bytes + F32 * s.scales)
    inputs = t * H * BF16 * 2 + t * (s.row_bytes + F32 * s.scales)   # x, out, x_send + scales
    return ws + inputs


def nccl_bytes(s: LayerShape, t: int) -> dict[str, int]:
    """NcclComm's buffers (and SymmA2A's symmetric ones) for one micro-batch of t tokens."""
    R, H, W = s.R, s.H, s.packed_width
    rows = t * W   # this rank's packed tokens
    if s.backend == "nccl_agrs":
        return {"buffers": rows + R * t * (W + BF16 * H) + t * H * BF16}
    n = int(round(t * _ranks_reached(R, s.K)))   # rows sent (and, on average, received)
    out = {"buffers": rows + n * (2 * W + 2 * BF16 * H) + t * H * (F32 + BF16)}
    if s.backend == "symm_a2av":
        out["symmetric memory"] = R * t * (2 * W + 2 * BF16 * H)
    return out


def _comm_parts(s: LayerShape, spans: list[int]) -> dict[str, int]:
    parts: dict[str, int] = {}

    def add(name: str, n: float) -> None:
        parts[name] = parts.get(name, 0) + int(n)

    for t in spans:
        if s.backend in ("ipc", "ipc_ll", "nvshmem_ll"):
            ll = s.backend != "ipc"
            name = "NVSHMEM workspace" if s.backend == "nvshmem_ll" else "IPC workspace"
            add(name, peer_bytes(s, t, ll, max(s.max_tokens, max(spans))))
        elif s.backend in ("nccl_a2a", "nccl_agrs", "symm_a2av"):
            for name, n in nccl_bytes(s, t).items():
                add(name, n)
        elif s.backend in ("deepep", "uccl_ep"):   # received rows (ids, weights), y, out, FP8 inputs
            n = t * _ranks_reached(s.R, s.K)
            add("buffers", n * (BF16 * s.H + s.row_bytes + F32 * s.scales + 8 * s.K)
                + t * s.H * BF16 + (t * (s.H + F32 * s.scales) if s.fp8 else 0))
        elif s.backend in ("deepep_ll", "uccl_ep_ll"):
            tm = max(s.max_tokens, max(spans))
            add("buffers", s.L * s.R * tm * s.H * BF16 + t * s.H * BF16)
        add("expert rows", s.pairs(t) * s.H * BF16 + s.pairs(t) * I32 * 2)
    if s.backend in ("deepep", "uccl_ep"):
        add(("DeepEP" if s.backend == "deepep" else "UCCL-EP") + " NVLink buffer", DEEPEP_NVL_BYTES)
    if s.backend == "uccl_ep_ll":   # made for each Case (DeepEP's is made once per launch)
        add("UCCL-EP low-latency buffer", ll_rdma_bytes(s, max(s.max_tokens, max(spans))))
    return parts


def ll_rdma_bytes(s: "LayerShape", max_tokens: int) -> int:
    """UCCL-EP's low-latency buffer (get_low_latency_rdma_size_hint, DeepEP's layout): two buffers
    in turn, each with a receive slot per expert and token for dispatch and one for combine, a
    slot being a BF16 row and its 16-byte header. An estimate: the hint itself needs the library."""
    return 2 * 2 * s.E * max_tokens * (s.H * BF16 + 16)


def layer_plan(case, prm: dict, ranks: int) -> MemoryPlan:
    s = LayerShape(case, prm, ranks)
    spans = _micro_tokens(s.T, s.overlap)
    expert_w = 3 * s.H * s.I * BF16
    parts = {"weights": s.L * expert_w, "tokens": s.T * s.H * BF16, **_comm_parts(s, spans)}
    if s.gemm == "fused":
        parts["packed w13 (fused kernel)"] = s.L * 2 * s.I * s.H * BF16
    big = max(s.pairs(t) for t in spans)
    codes = 2 * s.I * s.H   # one expert's w13 elements: the hash codes are int64
    transient = {
        "weight generation": codes * (4 * I64 + 2 * F32),
        "expert forward": big * (2 * s.I * BF16 + 2 * s.I * BF16 + s.H * BF16),
        "check": s.T * s.H * (F32 + 2 * BF16 + (F32 + BF16 if s.fp8 else 0)) + expert_w
        + codes * (4 * I64 + 2 * F32),
    }
    return MemoryPlan.of(parts, transient,
                         note="CUDA context, cuBLAS and NCCL internals and DeepEP's launch-wide "
                              "low-latency buffer are not counted")
