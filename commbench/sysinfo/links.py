"""The links a run's traffic can cross, per GPU and per NIC, with their rates: run.json's
``links`` and `commbench info`'s link table. The bounds (analysis/bounds.py) read only this, so
a stored run folder can be judged without the machine.

Per GPU: NVLink generation and active links, PCIe generation and width, HBM bandwidth; per
NIC: rate, NUMA node and the GPUs it is close to (nics.py). GPU facts come from NVML (pynvml /
nvidia-ml-py) when it imports and initialises, else from `nvidia-smi -q` plus the NVLink status
machine.py already parsed. Every probe is guarded: what cannot be read is None, and
``problems`` says why, so a bound that cannot be computed can say so.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

from . import nics as nic_probe
from .link_rates import NVLINK_GEN_BY_CC_MAJOR, hbm_from_clock, hbm_from_model, nvlink_gbps, pcie_gbps

SMI_TIMEOUT_S = 10.0
# NVML's nvmlNvlinkVersion_t (1.0, 2.0, 2.2, 3.0, 3.1, 4.0, 5.0) as NVLink generations; used only
# without a compute capability, since some drivers report 5.0 for Hopper's NVLink 4.
NVML_NVLINK_ENUM_GEN = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _try(fn, *args) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - an NVML call that fails means 'unknown', never a stopped run
        return None


def nvlink_generation(compute_capability: str | None, nvml_versions: set | None = None) -> int | None:
    """NVLink generation from the architecture (cc 9.x: NVLink 4), else from NVML's version enum."""
    major = re.match(r"(\d+)\.", compute_capability or "")
    if major and int(major.group(1)) in NVLINK_GEN_BY_CC_MAJOR:
        return NVLINK_GEN_BY_CC_MAJOR[int(major.group(1))]
    gens = {NVML_NVLINK_ENUM_GEN.get(v) for v in nvml_versions or ()} - {None}
    return max(gens) if gens else None


def nvml_gpus(nvml) -> list[dict[str, Any]]:
    """Raw per-GPU facts through an NVML binding (the pynvml module's API)."""
    nvml.nvmlInit()
    try:
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            active, versions = 0, set()
            for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
                if _try(nvml.nvmlDeviceGetNvLinkState, h, link):   # raises for a link the GPU lacks
                    active += 1
                    versions.add(_try(nvml.nvmlDeviceGetNvLinkVersion, h, link))
            cc = _try(nvml.nvmlDeviceGetCudaComputeCapability, h)
            pci = _try(nvml.nvmlDeviceGetPciInfo, h)
            gpus.append({
                "index": i, "name": _text(_try(nvml.nvmlDeviceGetName, h) or "") or None,
                "pci_bus_id": _text(pci.busId) if pci is not None else None,
                "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
                "nvlink_active": active, "nvml_nvlink_versions": sorted(v for v in versions if v is not None),
                "pcie_gen": _try(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "pcie_gen_current": _try(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "pcie_width": _try(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                "memory_clock_mhz": _try(nvml.nvmlDeviceGetMaxClockInfo, h, getattr(nvml, "NVML_CLOCK_MEM", 2)),
                "memory_bus_width_bits": _try(nvml.nvmlDeviceGetMemoryBusWidth, h),
            })
        return gpus
    finally:
        _try(nvml.nvmlShutdown)


def _field(block: str, *path: str) -> str | None:
    """A value in `nvidia-smi -q` text: the first ``path[-1] : value`` after each heading in turn."""
    pos = 0
    for i, name in enumerate(path):
        pattern = rf"^\s*{re.escape(name)}\s*:\s*(.*)$" if i == len(path) - 1 else rf"^\s*{re.escape(name)}\s*$"
        m = re.compile(pattern, re.MULTILINE).search(block, pos)
        if not m:
            return None
        pos = m.end()
    return m.group(1).strip()


def _int(text: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


def parse_smi_query(text: str) -> list[dict[str, Any]]:
    """Raw per-GPU facts from `nvidia-smi -q`: name, bus id, PCIe max/current generation and
    width, max memory clock (its output has no memory bus width)."""
    blocks = re.split(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$", text, flags=re.MULTILINE)
    gpus = []
    for i, (bus, block) in enumerate(zip(blocks[1::2], blocks[2::2])):
        gpus.append({
            "index": i, "name": _field(block, "Product Name"), "pci_bus_id": bus,
            "pcie_gen": _int(_field(block, "PCIe Generation", "Max")),
            "pcie_gen_current": _int(_field(block, "PCIe Generation", "Current")),
            "pcie_width": _int(_field(block, "Link Width", "Current")),
            "memory_clock_mhz": _int(_field(block, "Max Clocks", "Memory")),
            "memory_bus_width_bits": None,
        })
    return gpus


def _smi_query() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _import_nvml():
    try:
        import pynvml   # nvidia-ml-py installs this module
    except ImportError:
        return None
    return pynvml


def describe_gpu(raw: dict[str, Any], smi_nvlink: dict | None, sys_root: str, nics: list[dict]) -> dict[str, Any]:
    """One GPU's links and their rates from its raw facts (NVML or nvidia-smi)."""
    active = raw.get("nvlink_active")
    if active is None:
        active = (smi_nvlink or {}).get("active", 0)
    versions = set(raw.get("nvml_nvlink_versions") or ())
    gen = nvlink_generation(raw.get("compute_capability"), versions) if active else None
    gen_max, gen_now = raw.get("pcie_gen"), raw.get("pcie_gen_current")
    pcie_gen = max(g for g in (gen_max, gen_now, 0) if g is not None) or None   # idle links train down
    clock = hbm_from_clock(raw.get("memory_clock_mhz"), raw.get("memory_bus_width_bits"))
    model = hbm_from_model(raw.get("name"))
    path, numa = nic_probe.gpu_pci(sys_root, raw.get("pci_bus_id"))
    near, how = nic_probe.affinity(path, numa, nics)
    return {
        "index": raw.get("index"), "name": raw.get("name"), "pci_bus_id": raw.get("pci_bus_id"),
        "compute_capability": raw.get("compute_capability"), "numa_node": numa, "pci_path": path,
        "nvlink_gen": gen, "nvlink_active": active or 0, "nvlink_gbps": nvlink_gbps(gen, active or 0),
        "pcie_gen": pcie_gen, "pcie_gen_current": gen_now, "pcie_width": raw.get("pcie_width"),
        "pcie_gbps": pcie_gbps(pcie_gen, raw.get("pcie_width")),
        "memory_clock_mhz": raw.get("memory_clock_mhz"), "memory_bus_width_bits": raw.get("memory_bus_width_bits"),
        "hbm_gbps": clock or (model[0] if model else None),
        "hbm_label": model[1] if model else "hbm",
        "hbm_source": "clock x bus width" if clock else ("datasheet" if model else None),
        "nics": near, "nic_affinity": how,
    }


def collect(facts: dict[str, Any] | None = None, *, probe_gpu: bool = True, nvml=None,
            smi_text: str | None = None, sys_root: str = "/sys") -> dict[str, Any]:
    """run.json's ``links``. ``facts`` is machine.py's GPU facts (gpus, nvlink, multicast);
    ``nvml``/``smi_text``/``sys_root`` replace the real sources (tests)."""
    facts = facts or {}
    problems: list[str] = []
    nics = nic_probe.probe(sys_root)
    raw, source = [], None
    if probe_gpu:
        nvml = nvml if nvml is not None else (None if smi_text is not None else _import_nvml())
        raw = (_try(nvml_gpus, nvml) or []) if nvml is not None else []
        source = "nvml" if raw else None
        if not raw:
            text = smi_text if smi_text is not None else _smi_query()
            raw = parse_smi_query(text) if text else []
            source = "nvidia-smi -q" if raw else None
        if not raw:
            problems.append("no GPU facts: NVML (pynvml) did not load and `nvidia-smi -q` gave nothing")
    else:
        problems.append("GPU probes were skipped")
    cc_by_index = {g.get("index"): g.get("compute_capability") for g in facts.get("gpus") or []}
    smi_links = {g.get("index"): g for g in facts.get("nvlink") or []}
    gpus = []
    for r in raw:
        r.setdefault("compute_capability", cc_by_index.get(r.get("index")))
        gpus.append(describe_gpu(r, smi_links.get(r.get("index")), sys_root, nics))
    for g in gpus:
        if g["hbm_gbps"] is None:
            problems.append(f"GPU {g['index']} ({g['name']}): HBM bandwidth unknown (no memory clock and bus "
                            f"width, model not in the datasheet table)")
        if g["pcie_gbps"] is None:
            problems.append(f"GPU {g['index']}: PCIe generation or width unreadable")
    mc = facts.get("multicast_supported")
    for n in nics:
        n["gpus"] = [g["index"] for g in gpus if n["name"] in g["nics"]]
    return {"source": source, "gpus": gpus, "nics": nics, "problems": problems,
            "multicast": any(mc) if mc else None}
