"""run.json's ``links`` as table rows: each GPU's links and their limits, each NIC's rate and the
GPUs near it (`commbench info` and the report's bounds section)."""
from __future__ import annotations

from typing import Any


def _gbps(value: float | None) -> str:
    return f"{value:,.1f} GB/s" if value else "-"


def gpu_rows(links: dict[str, Any] | None) -> list[dict[str, str]]:
    rows = []
    for g in (links or {}).get("gpus") or []:
        nvlink = (f"NVLink {g['nvlink_gen']} x{g['nvlink_active']}: {_gbps(g['nvlink_gbps'])}"
                  if g.get("nvlink_gbps") else "none active")
        now = g.get("pcie_gen_current")
        trained_down = now and g.get("pcie_gen") and now < g["pcie_gen"]
        pcie = (f"Gen{g['pcie_gen']} x{g['pcie_width']}: {_gbps(g['pcie_gbps'])}"
                + (f" (Gen{now} now: idle links train down)" if trained_down else "")
                if g.get("pcie_gbps") else "unknown")
        hbm = (f"{g.get('hbm_label', 'hbm').upper()}: {_gbps(g['hbm_gbps'])} ({g.get('hbm_source')}); copy bound "
               f"{_gbps(g['hbm_gbps'] / 2)}" if g.get("hbm_gbps") else "unknown")
        rows.append({"GPU": str(g.get("index")), "name": str(g.get("name") or "-"), "NVLink (per direction)": nvlink,
                     "PCIe (per direction)": pcie, "HBM": hbm, "NICs near": ", ".join(g.get("nics") or []) or "-"})
    return rows


def nic_rows(links: dict[str, Any] | None) -> list[dict[str, str]]:
    return [{"NIC": n["name"], "kind": n.get("kind") or "-",
             "rate": f"{n['rate_gbit']:g} Gb/s" if n.get("rate_gbit") else "unknown",
             "per direction": _gbps(n.get("gbps")),
             "NUMA": "-" if n.get("numa_node") is None else str(n["numa_node"]),
             "GPUs near": ", ".join(str(i) for i in n.get("gpus") or []) or "-"}
            for n in (links or {}).get("nics") or []]
