"""Roofline of the expert step: the larger of its HBM time and its tensor-core time.

For a grouped SwiGLU expert GEMM over rows grouped by expert:
- bytes: the weights of every expert that gets at least one row (w13 and w2,
  3 * H * I BF16 elements each), the input rows read and the output rows
  written (BF16, H channels each). The SwiGLU intermediate is not counted: a
  kernel may keep it on chip.
- FLOPs: 2 * 3 * H * I per (token, expert) row (gate, up and down GEMMs).

roofline_us = max(bytes / HBM bandwidth, FLOPs / dense tensor-core peak). The
peaks are the card's own (memory clock x bus width; SMs x highest SM clock x the
architecture's rate: sysinfo/card_peaks.py), the datasheet figures only where the
driver cannot say (docs/metrics.md); a kernel can come close to the roofline, never past it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...sysinfo.link_rates import hbm_from_model

BF16_BYTES = 2
# Dense (no sparsity) tensor-core peaks in TFLOP/s from NVIDIA's datasheets, by GPU model:
# first match wins. H100 SXM and H200 share the GH100 SXM part: BF16 989, FP8 1979.
TENSOR_TFLOPS_BY_MODEL = (
    (r"(?<!G)H200", {"bfloat16": 989.0, "float8_e4m3": 1979.0}),
    (r"H100.*PCIe", {"bfloat16": 756.0, "float8_e4m3": 1513.0}),
    (r"H100", {"bfloat16": 989.0, "float8_e4m3": 1979.0}),
    (r"A100", {"bfloat16": 312.0}),
)


def tensor_tflops(gpu_name: str | None, dtype: str = "bfloat16") -> float | None:
    """Datasheet dense tensor-core peak of this GPU model for dtype, or None if unknown."""
    for pattern, peaks in TENSOR_TFLOPS_BY_MODEL:
        if gpu_name and re.search(pattern, gpu_name, re.IGNORECASE):
            return peaks.get(dtype)
    return None


@dataclass(frozen=True)
class Roofline:
    bytes: int
    flops: float
    hbm_us: float
    compute_us: float

    @property
    def roofline_us(self) -> float:
        return max(self.hbm_us, self.compute_us)

    @property
    def bound(self) -> str:
        return "hbm" if self.hbm_us >= self.compute_us else "compute"

    def pct_of(self, time_us: float) -> float:
        """Percent of the roofline a measured time reaches (100 = at the bound)."""
        return 100.0 * self.roofline_us / time_us if time_us > 0 else 0.0


def expert_roofline(rows_per_expert, hidden: int, inter: int, hbm_gbps: float,
                    peak_tflops: float) -> Roofline:
    """The bound of one expert step whose experts receive rows_per_expert rows each."""
    counts = [int(c) for c in rows_per_expert]
    rows = sum(counts)
    touched = sum(1 for c in counts if c > 0)
    weight_bytes = touched * 3 * hidden * inter * BF16_BYTES
    act_bytes = 2 * rows * hidden * BF16_BYTES
    total = weight_bytes + act_bytes
    flops = 6.0 * hidden * inter * rows
    return Roofline(total, flops, total / (hbm_gbps * 1e3), flops / (peak_tflops * 1e6))


def device_limits(device, dtype: str = "bfloat16") -> tuple[float, float, str]:
    """(HBM GB/s, dense tensor-core TFLOP/s, GPU name) of a CUDA device: the card's own peaks
    (sysinfo/card_peaks.py: memory clock x bus width, SMs x highest SM clock), each falling back
    to the datasheet tables; raises LookupError when neither knows the card."""
    import torch

    if torch.device(device).type != "cuda" or not torch.cuda.is_available():
        raise LookupError(f"{device} is not a CUDA GPU: no datasheet to read")
    from ...sysinfo.card_peaks import card_peaks

    name = torch.cuda.get_device_name(device)
    index = torch.device(device).index
    card = card_peaks(torch.cuda.current_device() if index is None else index)
    sheet_hbm, sheet_peak = hbm_from_model(name), tensor_tflops(name, dtype)
    hbm = (card.hbm_gbps if card else None) or (sheet_hbm[0] if sheet_hbm else None)
    peak = (card.tensor_tflops(dtype) if card else None) or sheet_peak
    if not hbm or not peak:
        raise LookupError(f"no HBM bandwidth or tensor-core peak for {name!r}")
    return hbm, peak, name


def layer_columns(routings, rank: int, hidden: int, inter: int, device, expert_us: float) -> dict:
    """The layer row's expert_roofline_us and pct_of_roofline: one expert step per micro-batch
    (each routing), this rank's local experts; {} on a GPU the datasheet tables do not hold."""
    try:
        hbm_gbps, peak, _ = device_limits(device)
    except LookupError:
        return {}
    total = 0.0
    for routed in routings:
        L = routed.local_experts
        counts = routed.tokens_per_expert()[rank * L:(rank + 1) * L].tolist()
        total += expert_roofline(counts, hidden, inter, hbm_gbps, peak).roofline_us
    return {"expert_roofline_us": total,
            "pct_of_roofline": 100.0 * total / expert_us if expert_us > 0 else 0.0}
