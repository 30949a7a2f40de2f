"""The limits of one node's links, read from run.json's ``links`` (sysinfo/links.py): the slowest
GPU's NVLink, PCIe and HBM, and what the node's NICs can carry for the GPUs a run used.

A limit is (GB/s per direction, label); the label names the link as the bound_link column does:
``nvlink4x18``, ``pcie5x16``, ``hbm3e``, ``nic-400Gx8``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The columns analysis/bounds.py adds to rows (report, accept rules and compare may name them).
BOUND_COLUMNS = ("bound_gbps", "bound_link", "bound_reason", "pct_of_bound")


@dataclass(frozen=True)
class Limit:
    gbps: float
    link: str


class NoLimit(Exception):
    """Why a limit cannot be known (the message becomes bound_reason)."""


def _gpus(links: dict | None) -> list[dict[str, Any]]:
    gpus = (links or {}).get("gpus") or []
    if not gpus:
        if not links:
            raise NoLimit("run.json does not describe the machine's links (a run from before commbench recorded them)")
        raise NoLimit("the machine's links were not read: " + ("; ".join(links.get("problems") or []) or "no GPU"))
    return gpus


def nvlink(links: dict | None) -> Limit | None:
    """The slowest GPU's NVLink (links x per-link rate), or None when a GPU has no active NVLink."""
    gpus = _gpus(links)
    if not all(g.get("nvlink_gbps") for g in gpus):
        return None
    slow = min(gpus, key=lambda g: g["nvlink_gbps"])
    return Limit(slow["nvlink_gbps"], f"nvlink{slow['nvlink_gen']}x{slow['nvlink_active']}")


def pcie(links: dict | None) -> Limit:
    gpus = _gpus(links)
    if not all(g.get("pcie_gbps") for g in gpus):
        raise NoLimit("PCIe generation or width unreadable: " + "; ".join((links or {}).get("problems") or []))
    slow = min(gpus, key=lambda g: g["pcie_gbps"])
    return Limit(slow["pcie_gbps"], f"pcie{slow['pcie_gen']}x{slow['pcie_width']}")


def gpu_link(links: dict | None) -> Limit:
    """What one GPU's traffic to another GPU of the node crosses: NVLink, else PCIe."""
    return nvlink(links) or pcie(links)


# Memory bus width (bits) by GPU model, for a probe that read the memory clock but not the width
# (`nvidia-smi -q` prints no bus width): first match wins, as link_rates.HBM_BY_MODEL.
BUS_BITS_BY_MODEL = ((r"(?<!G)H200", 6144), (r"H100.*PCIe", 5120), (r"H100", 5120), (r"B200", 8192))


def gpu_hbm_gbps(g: dict) -> float | None:
    """One GPU's HBM peak: the card's memory clock x bus width where the probe had both; where it
    fell back to the datasheet but read the clock, the clock x the model's bus width when that is
    higher (an H200's datasheet 4,800 GB/s is below its 3,201 MHz x 6,144 bits = 4,917 GB/s, and a
    bound below what the card can do is a wrong bound)."""
    import re

    from ..sysinfo.link_rates import hbm_from_clock

    gbps = g.get("hbm_gbps")
    if g.get("hbm_source") == "datasheet" and g.get("memory_clock_mhz"):
        bits = next((b for pat, b in BUS_BITS_BY_MODEL if re.search(pat, g.get("name") or "", re.I)), None)
        clock = hbm_from_clock(g["memory_clock_mhz"], bits)
        if clock and clock > (gbps or 0):
            return clock
    return gbps


def hbm(links: dict | None) -> Limit:
    gpus = _gpus(links)
    rates = [gpu_hbm_gbps(g) for g in gpus]
    if not all(rates):
        raise NoLimit("HBM bandwidth unknown: " + "; ".join((links or {}).get("problems") or []))
    slow = min(range(len(gpus)), key=lambda i: rates[i])
    return Limit(rates[slow], gpus[slow].get("hbm_label") or "hbm")


def _nic_label(nics: list[dict]) -> str:
    rates = sorted({int(n["rate_gbit"]) for n in nics})
    rate = "/".join(f"{r}G" for r in rates)
    return f"nic-{rate}" + (f"x{len(nics)}" if len(nics) > 1 else "")


@dataclass(frozen=True)
class NodeNics:
    """What the NICs of a node carry for its used GPUs: ``used`` (per direction, all used
    GPUs together), ``per_gpu`` (the smallest share one used GPU gets), ``railed`` (every used GPU
    has NICs of its own), and the label of the NICs counted."""

    used: float
    per_gpu: float
    railed: bool
    link: str


def node_nics(links: dict | None, ranks_per_node: int) -> NodeNics:
    """The NICs the first ``ranks_per_node`` GPUs use (ranks bind GPUs by local rank). With rail
    affinity each GPU gets its near NICs' rate, shared with the other used GPUs near them;
    without it every NIC of the node is shared by all used GPUs."""
    gpus = sorted(_gpus(links), key=lambda g: g.get("index") or 0)[:max(1, ranks_per_node)]
    nics = {n["name"]: n for n in (links or {}).get("nics") or []}
    if not nics:
        raise NoLimit("no active network adapter was found on the probed host (sysfs)")
    unknown = [name for name, n in nics.items() if not n.get("gbps")]
    if unknown:
        raise NoLimit(f"NIC rate unreadable: {', '.join(unknown)}")
    railed = all(g.get("nics") for g in gpus)
    if not railed:
        total = sum(n["gbps"] for n in nics.values())
        return NodeNics(total, total / len(gpus), False, _nic_label(list(nics.values())))
    users = {name: sum(name in g["nics"] for g in gpus) for name in nics}
    shares = [sum(nics[name]["gbps"] / users[name] for name in g["nics"] if name in nics) for g in gpus]
    counted = [nics[name] for name in nics if users[name]]
    return NodeNics(sum(n["gbps"] for n in counted), min(shares), True, _nic_label(counted))


def link_name(link: str) -> str:
    """A bound_link label in words for findings: nvlink4x18 -> 'NVLink 4 (18 links)'."""
    import re

    m = re.fullmatch(r"nvlink(\d+)x(\d+)( nvls)?", link)
    if m:
        return f"NVLink {m[1]} ({m[2]} links{', NVLS' if m[3] else ''})"
    m = re.fullmatch(r"pcie(\d+)x(\d+)", link)
    if m:
        return f"PCIe {m[1]} x{m[2]}"
    if link.startswith("nic-"):
        return "the NICs (" + link[4:] + ")"
    return link.upper() if link.startswith("hbm") else link
