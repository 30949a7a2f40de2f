"""The bound of a copy family row (families/copy) from run.json's ``links``: the link of the GPU
(or GPU pair) the row names, not the slowest of the node, so a pair matrix shows each pair
against its own links. busbw of a copy is bytes copied per second (both directions together for
bidir); the rules and their sources are in docs/metrics.md ("Bounds", copies).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from .bound_limits import Limit, NoLimit, _gpus, gpu_hbm_gbps

HOST_OPS = ("h2d", "d2h")
PAIR_OPS = ("p2p", "bidir")


def _index(row: Mapping, key: str) -> int | None:
    try:
        v = float(row.get(key))
    except (TypeError, ValueError):
        return None
    return int(v) if math.isfinite(v) and v >= 0 else None


def _gpu(links: dict | None, index: int, bus_id: Any = None) -> dict[str, Any]:
    """The GPU a row names: by PCI address when the row has it (a CUDA index counts only the
    visible GPUs, NVML's every GPU), else by index."""
    gpus = _gpus(links)
    bus = str(bus_id or "").strip().upper()
    if bus and bus != "NAN":
        for g in gpus:
            if str(g.get("pci_bus_id") or "").upper() == bus:
                return g
    for g in gpus:
        if g.get("index") == index:
            return g
    raise NoLimit(f"GPU {index} is not among the GPUs run.json's links describe")


def _pcie(g: dict) -> Limit:
    if not g.get("pcie_gbps"):
        raise NoLimit(f"GPU {g.get('index')}: PCIe generation or width unreadable")
    return Limit(g["pcie_gbps"], f"pcie{g['pcie_gen']}x{g['pcie_width']}")


def _pair(a: dict, b: dict) -> tuple[Limit, str]:
    """NVLink when both GPUs have it (the slower side), else PCIe (the slower side)."""
    if a.get("nvlink_gbps") and b.get("nvlink_gbps"):
        slow = min((a, b), key=lambda g: g["nvlink_gbps"])
        return (Limit(slow["nvlink_gbps"], f"nvlink{slow['nvlink_gen']}x{slow['nvlink_active']}"),
                "NVLink: assumes all of a GPU's links reach its peer (an NVSwitch node); a direct-link "
                "mesh gives a pair fewer, and the bound is then above what the pair can carry")
    slow = min((_pcie(a), _pcie(b)), key=lambda lim: lim.gbps)
    return slow, "no NVLink between the pair: PCIe, the slower GPU's link (a path through the CPU can be slower)"


def copy_bound(row: Mapping, links: dict | None) -> tuple[Limit | None, str]:
    """(the row's limit, what it assumes or why there is none)."""
    op = str(row.get("op"))
    gpu, peer = _index(row, "gpu"), _index(row, "peer")
    try:
        if gpu is None:
            return None, "copy row without its gpu column"
        if op in HOST_OPS:
            note = ("pageable host memory: the driver stages it through pinned buffers over the same link"
                    if str(row.get("memory")) == "pageable" else "")
            return _pcie(_gpu(links, gpu, row.get("gpu_bus_id"))), note
        if op == "d2d":
            g = _gpu(links, gpu, row.get("gpu_bus_id"))
            hbm_gbps = gpu_hbm_gbps(g)
            if not hbm_gbps:
                raise NoLimit(f"GPU {gpu}: HBM bandwidth unknown")
            return (Limit(hbm_gbps / 2, g.get("hbm_label") or "hbm"),
                    "a copy within one GPU reads and writes HBM: bound = HBM / 2")
        if op in PAIR_OPS:
            if peer is None:
                return None, f"{op} row without its peer column"
            limit, note = _pair(_gpu(links, gpu, row.get("gpu_bus_id")), _gpu(links, peer, row.get("peer_bus_id")))
            if op == "bidir":
                return Limit(limit.gbps * 2, limit.link + " both ways"), note
            return limit, note
        return None, f"no bound rule for copy {op}"
    except NoLimit as exc:
        return None, str(exc)
