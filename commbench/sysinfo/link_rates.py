"""Published rates of the links a GPU's traffic can cross, per direction, in GB/s (1e9 bytes/s).

Sources are named in docs/metrics.md ("Bounds"). These are spec figures: a measured number can
come close to them but never above them (a bound below a measurement is a wrong bound).
"""
from __future__ import annotations

import re

# NVLink: GB/s per direction per link, by generation (P100: 4 links 160 GB/s both ways together;
# V100: 6 links 300 GB/s; A100: 12 links 600 GB/s; H100/H200: 18 links 900 GB/s; B200: 18 links 1.8 TB/s).
NVLINK_GBPS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
# NVLink generation from the compute capability's major version, when NVML cannot say.
NVLINK_GEN_BY_CC_MAJOR = {6: 1, 7: 2, 8: 3, 9: 4, 10: 5}

# PCIe: GB/s per direction per lane after line encoding (8b/10b up to Gen2, 128b/130b for Gen3-5,
# FLIT mode for Gen6): Gen5 x16 = 32 GT/s x 16 x 128/130 / 8 = 63.0 GB/s.
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8, 5: 32 * 128 / 130 / 8,
                      6: 64 * 242 / 256 / 8}

# HBM bandwidth (GB/s, reads and writes together) by GPU model, from NVIDIA's datasheets. The
# first pattern that matches the name (case-insensitive) wins: the more specific ones come first.
HBM_BY_MODEL = (
    (r"(?<!G)H200", 4800.0, "hbm3e"),   # not GH200, whose HBM3e runs faster
    (r"H100.*NVL", 3900.0, "hbm3"),
    (r"H100.*PCIe", 2000.0, "hbm2e"),
    (r"H100", 3350.0, "hbm3"),          # H100 SXM5 80GB ("NVIDIA H100 80GB HBM3")
    (r"B200", 8000.0, "hbm3e"),
    (r"A100.*PCIe.*80GB|A100 80GB PCIe", 1935.0, "hbm2e"),
    (r"A100.*80GB", 2039.0, "hbm2e"),   # A100 SXM4 80GB
    (r"A100", 1555.0, "hbm2"),          # A100 40GB
)


def nvlink_gbps(generation: int | None, active_links: int) -> float | None:
    """Per-GPU NVLink bandwidth per direction: links x the generation's per-link rate."""
    per_link = NVLINK_GBPS_PER_LINK.get(generation or 0)
    return per_link * active_links if per_link and active_links > 0 else None


def pcie_gbps(generation: int | None, width: int | None) -> float | None:
    """A PCIe link's bandwidth per direction after encoding (Gen5 x16: 63.0 GB/s)."""
    per_lane = PCIE_GBPS_PER_LANE.get(generation or 0)
    return round(per_lane * width, 2) if per_lane and width and width > 0 else None


def hbm_from_model(name: str | None) -> tuple[float, str] | None:
    """(GB/s, memory type) from the datasheet table, or None for a model it does not hold."""
    for pattern, gbps, kind in HBM_BY_MODEL:
        if name and re.search(pattern, name, re.IGNORECASE):
            return gbps, kind
    return None


def hbm_from_clock(memory_clock_mhz: float | None, bus_width_bits: int | None) -> float | None:
    """Peak HBM bandwidth from the memory clock and bus width, double data rate:
    3,201 MHz x 6,144 bits x 2 / 8 = 4,917 GB/s (an H200)."""
    if not memory_clock_mhz or not bus_width_bits:
        return None
    return round(memory_clock_mhz * 1e6 * bus_width_bits * 2 / 8 / 1e9, 1)


def nic_gbps(rate_gbit: float | None) -> float | None:
    """A NIC's line rate (Gb/s) in GB/s per direction: 400 Gb/s NDR = 50 GB/s."""
    return rate_gbit / 8 if rate_gbit and rate_gbit > 0 else None
