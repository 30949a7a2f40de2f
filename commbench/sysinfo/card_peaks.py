"""The peaks of the card a rank runs on, from the card itself: HBM bandwidth from its memory
clock and bus width, dense tensor-core FLOP/s from its SM count and highest SM clock. The same
numbers `commbench info` derives (links.py: clock x bus width), so a bound holds on an H100 80 GB
(2,619 MHz x 5,120 bits: 3,352 GB/s) as on an H200 (3,201 MHz x 6,144 bits: 4,917 GB/s), and a
kernel whose clocks boost above the datasheet's reference clock still stays under its bound
(H100 SXM at 1,980 MHz: 132 SMs x 4,096 BF16 FLOP per clock = 1,070 TFLOP/s; the datasheet's
989 TFLOP/s is the same part at 1,830 MHz).

Read through the CUDA driver (libcuda.so.1, cuDeviceGetAttribute) with ctypes: no package, no
context. None where the driver cannot be read or the architecture's rate is not in the table.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache

from .link_rates import hbm_from_clock

# CUdevice_attribute values (cuda.h)
CLOCK_RATE_KHZ, MEMORY_CLOCK_RATE_KHZ, GLOBAL_MEMORY_BUS_WIDTH = 13, 36, 37
MULTIPROCESSOR_COUNT, CC_MAJOR, CC_MINOR = 16, 75, 76
# Dense tensor-core FLOP per SM per clock, by compute capability and dtype (NVIDIA's architecture
# whitepapers: A100 312 TFLOP/s BF16 = 108 SMs x 2,048 x 1.41 GHz; H100 SXM 989 TFLOP/s =
# 132 SMs x 4,096 x 1.83 GHz, FP8 twice that).
TENSOR_FLOP_PER_SM_CLOCK = {
    (8, 0): {"bfloat16": 2048},
    (9, 0): {"bfloat16": 4096, "float8_e4m3": 8192},
}


@dataclass(frozen=True)
class CardPeaks:
    hbm_gbps: float | None
    sm_count: int
    sm_clock_mhz: float
    compute_capability: tuple[int, int]

    def tensor_tflops(self, dtype: str = "bfloat16") -> float | None:
        rate = TENSOR_FLOP_PER_SM_CLOCK.get(self.compute_capability, {}).get(dtype)
        if not rate or not self.sm_count or not self.sm_clock_mhz:
            return None
        return self.sm_count * rate * self.sm_clock_mhz * 1e6 / 1e12


def _driver():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if lib.cuInit(0) != 0:
        return None
    return lib


@lru_cache(maxsize=None)
def card_peaks(ordinal: int) -> CardPeaks | None:
    """The peaks of CUDA device ``ordinal`` (as CUDA numbers the visible devices), or None."""
    lib = _driver()
    if lib is None:
        return None
    dev = ctypes.c_int()
    if lib.cuDeviceGet(ctypes.byref(dev), ordinal) != 0:
        return None

    def attr(which: int) -> int | None:
        out = ctypes.c_int()
        return out.value if lib.cuDeviceGetAttribute(ctypes.byref(out), which, dev) == 0 else None

    mem_khz, bus, sm_khz = attr(MEMORY_CLOCK_RATE_KHZ), attr(GLOBAL_MEMORY_BUS_WIDTH), attr(CLOCK_RATE_KHZ)
    return CardPeaks(hbm_gbps=hbm_from_clock(mem_khz / 1e3 if mem_khz else None, bus),
                     sm_count=attr(MULTIPROCESSOR_COUNT) or 0, sm_clock_mhz=(sm_khz or 0) / 1e3,
                     compute_capability=(attr(CC_MAJOR) or 0, attr(CC_MINOR) or 0))
