"""Machines for the bound tests, without their hardware: a fake NVML module (pynvml's API), a
fake sysfs tree (PCI devices, InfiniBand ports) and the `links` each gives (sysinfo/links.py)."""
from __future__ import annotations

import os
from pathlib import Path

from commbench.sysinfo import links

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "links"


class NVMLError(Exception):
    pass


class FakeNvml:
    """pynvml's calls commbench makes, answering for ``gpus``: dicts of name, bus, cc, nvlinks
    (active link count), nvlink_version (the NVML enum it reports), pcie (max gen, current gen,
    width), mem_clock, bus_width."""

    NVMLError = NVMLError
    NVML_NVLINK_MAX_LINKS = 18
    NVML_CLOCK_MEM = 2

    def __init__(self, gpus):
        self.gpus = gpus
        self.shut = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def nvmlDeviceGetName(self, h):
        return h["name"]

    def nvmlDeviceGetPciInfo(self, h):
        return type("Pci", (), {"busId": h["bus"].encode()})()

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return h["cc"]

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= h["nvlinks"]:
            raise NVMLError("Not Supported")
        return 1

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return h["nvlink_version"]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return h["pcie"][0]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return h["pcie"][1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return h["pcie"][2]

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        assert clock == self.NVML_CLOCK_MEM
        return h["mem_clock"]

    def nvmlDeviceGetMemoryBusWidth(self, h):
        if h.get("bus_width") is None:
            raise NVMLError("Not Supported")
        return h["bus_width"]


def h200_pcie_nvml() -> FakeNvml:
    """The one-H200 machine: no NVLink, PCIe Gen5 x16 (idle at Gen1), 3,201 MHz x 6,144 bits."""
    return FakeNvml([{"name": "NVIDIA H200", "bus": "00000000:1B:00.0", "cc": (9, 0), "nvlinks": 0,
                      "nvlink_version": 0, "pcie": (5, 1, 16), "mem_clock": 3201, "bus_width": 6144}])


def h100_nvml(count: int = 8) -> FakeNvml:
    """An HGX H100 node: 18 NVLink 4 links per GPU (NVML says version 5.0, as some drivers do for
    Hopper), PCIe Gen5 x16, HBM3 at 2,619 MHz x 5,120 bits."""
    return FakeNvml([{"name": "NVIDIA H100 80GB HBM3", "bus": f"00000000:{0x18 + 0x10 * i:02X}:00.0", "cc": (9, 0),
                      "nvlinks": 18, "nvlink_version": 7, "pcie": (5, 5, 16), "mem_clock": 2619,
                      "bus_width": 5120} for i in range(count)])


def rail_sysfs(root: Path, gpus: int = 8, rate: str = "400 Gb/sec (4X NDR)") -> Path:
    """sysfs of a rail-optimised node: GPU i and mlx5_i under PCIe switch i, NUMA node i // 4;
    plus eth0 (100 Gb/s) on its own root port, which is not counted while IB ports are active."""
    devices = root / "devices"
    for i in range(gpus):
        b = 0x18 + 0x10 * i - 3   # root port b, switch b+1, its ports b+2; GPU b+3 (NVML's bus id), NIC b+4
        switch = devices / f"pci0000:{b:02x}" / f"0000:{b:02x}:01.0" / f"0000:{b + 1:02x}:00.0"
        gpu = switch / f"0000:{b + 2:02x}:00.0" / f"0000:{b + 3:02x}:00.0"
        nic = switch / f"0000:{b + 2:02x}:01.0" / f"0000:{b + 4:02x}:00.0"
        for dev in (gpu, nic):
            dev.mkdir(parents=True)
            (dev / "numa_node").write_text(f"{i // 4}\n")
        _link(root / "bus" / "pci" / "devices" / gpu.name, gpu)
        port = root / "class" / "infiniband" / f"mlx5_{i}" / "ports" / "1"
        port.mkdir(parents=True)
        (port / "rate").write_text(rate + "\n")
        (port / "state").write_text("4: ACTIVE\n")
        (port / "link_layer").write_text("InfiniBand\n")
        _link(root / "class" / "infiniband" / f"mlx5_{i}" / "device", nic)
    eth = devices / "pci0000:00" / "0000:00:1c.0" / "0000:01:00.0"
    eth.mkdir(parents=True)
    (eth / "numa_node").write_text("0\n")
    net = root / "class" / "net" / "eth0"
    net.mkdir(parents=True)
    (net / "speed").write_text("100000\n")
    (net / "operstate").write_text("up\n")
    _link(net / "device", eth)
    return root


def _link(path: Path, target: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def h200_links(tmp_path: Path) -> dict:
    return links.collect({"multicast_supported": [False]}, nvml=h200_pcie_nvml(), sys_root=str(tmp_path / "nosys"))


def h100_links(tmp_path: Path) -> dict:
    """8x H100 NVSwitch node, multicast supported, no NIC (a single-node box)."""
    return links.collect({"multicast_supported": [True] * 8}, nvml=h100_nvml(), sys_root=str(tmp_path / "nosys"))


def h100_rail_links(tmp_path: Path) -> dict:
    """One node of a 2-node layout: 8x H100 and 8x 400G InfiniBand rails."""
    return links.collect({"multicast_supported": [True] * 8}, nvml=h100_nvml(),
                         sys_root=str(rail_sysfs(tmp_path / "sys")))
