"""SwiGLU experts: deterministic weights, the expert math, and the grouped GEMM over local experts.

Every rank can build any expert's weights from its global id alone (a closed-form
hash, no random generator), so the layer on rank r and the dense reference on
any rank use bit-identical weights on the CPU and on any GPU.

An expert is ``y = W2 (silu(Wg x) * (Wu x))``; gate and up are one fused GEMM
(``w13`` = [Wg; Wu], [2I, H]) and ``w2`` is [H, I] (both out-features first, as
nn.Linear keeps them).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

HASH_MODULUS = 1 << 31
CODE_RANGE = 509          # weights are (code - 254) * 2^-shift: exact in BF16 (|code - 254| <= 254)
CODE_STD = 147.0          # std of a code drawn uniformly from -254..254
TOKEN_STD = 9.2           # std of reference.make_tokens' channels (|code| / 16, codes up to 254)
GEMM_PATHS = ("grouped_mm", "loop", "fused")


def _shift_for(std_in: float, fan_in: int) -> int:
    """Power-of-two scale that gives the GEMM output a standard deviation near 1."""
    return max(0, round(math.log2(CODE_STD * std_in * math.sqrt(fan_in))))


def _codes(expert: int, rows: int, cols: int, salt: int, device) -> torch.Tensor:
    """int64 [rows, cols] in -254..254, a hash of (expert, salt, element index)."""
    lin = torch.arange(rows * cols, device=device, dtype=torch.int64).view(rows, cols)
    a = (lin * 2654435761 + (expert + 1) * 40503 + salt * 977) % HASH_MODULUS
    a = a ^ (a >> 13)
    a = (a * 1103515245 + 12345) % HASH_MODULUS
    return (a >> 7) % CODE_RANGE - CODE_RANGE // 2


def expert_weights(expert: int, hidden: int, inter: int, device="cpu"):
    """(w13 [2I, H], w2 [H, I]) BF16 of global expert ``expert``; the same on every device."""
    s13 = _shift_for(TOKEN_STD, hidden)
    s2 = _shift_for(0.5, inter)   # silu(g) * u of unit-scale g, u has a std near 0.5
    w13 = (_codes(expert, 2 * inter, hidden, 1, device).float() * 2.0 ** -s13).to(torch.bfloat16)
    w2 = (_codes(expert, hidden, inter, 2, device).float() * 2.0 ** -s2).to(torch.bfloat16)
    return w13, w2


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of a fused [rows, 2I] GEMM output."""
    inter = gate_up.shape[-1] // 2
    return F.silu(gate_up[..., :inter]) * gate_up[..., inter:]


def expert_forward(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One expert on BF16 rows x [n, H] -> [n, H] (the reference's building block)."""
    return F.linear(swiglu(F.linear(x, w13)), w2)


def has_grouped_mm() -> bool:
    return hasattr(torch, "_grouped_mm")


class LocalExperts:
    """The experts one rank owns, stacked: w13 [L, 2I, H], w2 [L, H, I] (BF16).

    ``forward(xe, offs)`` runs every expert over its contiguous rows of ``xe``
    ([rows, H], grouped by local expert); ``offs`` (int32 [L], on the device)
    are the groups' cumulative ends, so no group size ever reaches the host on
    the grouped and fused paths. ``gemm``: "grouped_mm" (torch._grouped_mm),
    "loop" (one GEMM per expert; reads the offsets on the host, one sync per
    call), "fused" (our Triton kernel, fused_moe_triton: SwiGLU in the gate/up
    GEMM's epilogue) or "auto" (grouped_mm where it works, else loop).
    """

    def __init__(self, first_expert: int, num_local: int, hidden: int, inter: int, device,
                 gemm: str = "auto"):
        self.first, self.num_local, self.hidden, self.inter = first_expert, num_local, hidden, inter
        self.device = torch.device(device)
        self.w13 = torch.empty(num_local, 2 * inter, hidden, dtype=torch.bfloat16, device=device)
        self.w2 = torch.empty(num_local, hidden, inter, dtype=torch.bfloat16, device=device)
        for l in range(num_local):
            self.w13[l], self.w2[l] = expert_weights(first_expert + l, hidden, inter, device)
        self.fused = None
        self.gemm = self._choose(gemm)

    def _choose(self, gemm: str) -> str:
        if gemm == "loop":
            return "loop"
        if gemm == "fused":
            from ...errors import SkipCase
            from . import fused_moe_triton

            why = fused_moe_triton.available()
            if why:
                raise SkipCase(why)
            self.fused = fused_moe_triton.FusedExperts(self.w13, self.w2)
            return "fused"
        if not has_grouped_mm():
            if gemm == "grouped_mm":
                raise RuntimeError("this torch build has no torch._grouped_mm")
            return "loop"
        try:   # the build may have the op but not for this device or dtype
            self._probe()
        except (RuntimeError, NotImplementedError) as exc:
            if gemm == "grouped_mm":
                raise RuntimeError(f"torch._grouped_mm is unusable here: {exc}") from exc
            return "loop"
        return "grouped_mm"

    def _probe(self) -> None:
        """A tiny grouped GEMM on this device, compared with the loop (raises if unusable)."""
        rows = 16 * self.num_local
        x = torch.ones(rows, self.hidden, dtype=torch.bfloat16, device=self.device)
        offs = torch.arange(1, self.num_local + 1, dtype=torch.int32, device=self.device) * 16
        got = torch._grouped_mm(x, self.w13.transpose(-2, -1), offs=offs)
        want = torch.cat([F.linear(x[16 * l:16 * (l + 1)], self.w13[l]) for l in range(self.num_local)])
        if not torch.allclose(got.float(), want.float(), rtol=2 ** -6, atol=1e-3):
            raise RuntimeError("torch._grouped_mm disagrees with per-expert GEMMs")

    def forward(self, xe: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        if self.gemm == "fused":
            return self.fused.forward(xe, offs)
        if self.gemm == "grouped_mm":
            gate_up = torch._grouped_mm(xe, self.w13.transpose(-2, -1), offs=offs)
            return torch._grouped_mm(swiglu(gate_up), self.w2.transpose(-2, -1), offs=offs)
        out = torch.empty_like(xe)
        start = 0
        for l, end in enumerate(offs.tolist()):
            if end > start:
                out[start:end] = expert_forward(xe[start:end], self.w13[l], self.w2[l])
            start = end
        return out
