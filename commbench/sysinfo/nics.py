"""The node's network adapters from sysfs, and which GPUs each one is close to (rails).

InfiniBand and RoCE ports come from ``/sys/class/infiniband/*/ports/*`` (rate, state, link
layer); plain Ethernet from ``/sys/class/net/*/speed`` (Mb/s) for adapters that have a PCI device
and are not already an RDMA port. A GPU's NICs are those under the same PCIe switch (the rail a
rail-optimised node gives each GPU); failing that, those on its NUMA node.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from .link_rates import nic_gbps

BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d")
SWITCH_DEPTH = 2   # common PCI path below the host bridge: root port + switch port = same switch


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _numa(device: Path) -> int | None:
    text = _read(device / "numa_node")
    return int(text) if text and re.fullmatch(r"-?\d+", text) and int(text) >= 0 else None


def _pci_path(device: Path) -> list[str]:
    """The device's PCI ancestry below the host bridge (pci0000:00/...): bridge and device ids."""
    parts = Path(os.path.realpath(device)).parts
    roots = [i for i, p in enumerate(parts) if p.startswith("pci")]
    return list(parts[roots[-1] + 1:]) if roots else []


def _rdma_ports(sys_root: Path) -> list[dict[str, Any]]:
    ports = []
    for dev in sorted((sys_root / "class" / "infiniband").glob("*")):
        for port in sorted((dev / "ports").glob("*")):
            rate = re.match(r"\s*([\d.]+)\s*Gb/sec", _read(port / "rate") or "")
            state = _read(port / "state") or ""
            layer = _read(port / "link_layer") or "InfiniBand"
            ports.append({
                "name": f"{dev.name}:{port.name}", "kind": "roce" if layer.lower() == "ethernet" else "infiniband",
                "rate_gbit": float(rate.group(1)) if rate else None, "active": "ACTIVE" in state.upper(),
                "device": dev / "device",
            })
    return ports


def _ethernet(sys_root: Path, rdma_devices: set[str]) -> list[dict[str, Any]]:
    out = []
    for dev in sorted((sys_root / "class" / "net").glob("*")):
        device = dev / "device"
        if not device.exists() or os.path.realpath(device) in rdma_devices:
            continue   # virtual (lo, bridges, veth) or the netdev of an RDMA port counted above
        speed = _read(dev / "speed")
        mbit = int(speed) if speed and re.fullmatch(r"\d+", speed) else 0
        out.append({"name": dev.name, "kind": "ethernet", "rate_gbit": mbit / 1000 if mbit > 0 else None,
                    "active": (_read(dev / "operstate") or "") == "up", "device": device})
    return out


def probe(sys_root: str | Path = "/sys") -> list[dict[str, Any]]:
    """Every adapter the bound may use: active RDMA ports, else Ethernet ports that are up.

    Each: name, kind (infiniband | roce | ethernet), rate_gbit, gbps (per direction), numa_node,
    pci_bus_id, pci_path (for rail affinity)."""
    root = Path(sys_root)
    rdma = _rdma_ports(root)
    chosen = [p for p in rdma if p["active"]]
    if not chosen:
        chosen = [e for e in _ethernet(root, {os.path.realpath(p["device"]) for p in rdma}) if e["active"]]
    nics = []
    for nic in chosen:
        device = nic.pop("device")
        nic.pop("active")
        path = _pci_path(device)
        bdf = [p for p in path if BDF.fullmatch(p)]
        nics.append({**nic, "gbps": nic_gbps(nic["rate_gbit"]), "numa_node": _numa(device),
                     "pci_bus_id": bdf[-1] if bdf else None, "pci_path": path})
    return nics


def gpu_pci(sys_root: str | Path, bus_id: str | None) -> tuple[list[str], int | None]:
    """(PCI ancestry, NUMA node) of a GPU by its bus id (nvidia-smi's 00000000:1B:00.0 form)."""
    if not bus_id:
        return [], None
    m = re.fullmatch(r"(?:[0-9a-fA-F]*?)([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.(\d)", bus_id.strip())
    if not m:
        return [], None
    device = Path(sys_root) / "bus" / "pci" / "devices" / f"{m[1]}:{m[2]}:{m[3]}.{m[4]}".lower()
    if not device.exists():
        return [], None
    return _pci_path(device), _numa(device)


def _common(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def affinity(gpu_path: list[str], gpu_numa: int | None, nics: list[dict[str, Any]]) -> tuple[list[str], str | None]:
    """(names of the GPU's NICs, how they were found: 'pcie-switch' | 'numa' | None)."""
    scores = [(_common(gpu_path, n.get("pci_path") or []), n) for n in nics]
    best = max((s for s, _ in scores), default=0)
    if gpu_path and best >= SWITCH_DEPTH:
        return [n["name"] for s, n in scores if s == best], "pcie-switch"
    if gpu_numa is not None:
        near = [n["name"] for n in nics if n.get("numa_node") == gpu_numa]
        if near:
            return near, "numa"
    return [], None
