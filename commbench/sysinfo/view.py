"""The `commbench info` view: sysinfo.collect()'s dict as rich tables."""
from __future__ import annotations

from typing import Any


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items() if v is not None) or "-"
    if isinstance(value, list):
        return " ".join(_fmt(v) for v in value)
    return str(value)


def format_info(info: dict[str, Any]) -> Any:
    """A rich renderable for `commbench info`: versions, GPUs, links, multicast, topology."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    facts = Table(title="commbench info", show_header=False, box=None)
    git = info.get("git_revision")
    torch_cuda = info.get("torch_cuda") or "none: CPU build"
    mc = info.get("multicast_supported")
    for key, value in (
        ("host", info.get("hostname")), ("os", info.get("os")), ("python", info.get("python")),
        ("commbench", f"{info.get('commbench_version')}"
                      + (f" (git {git[:12]}{' dirty' if info.get('git_dirty') else ''})" if git else "")),
        ("driver", info.get("driver")), ("cuda driver api", info.get("cuda_driver")),
        ("cuda runtime", info.get("cuda_runtime")),
        ("torch", f"{info['torch']} (cuda {torch_cuda})" if info.get("torch") else None),
        ("nccl", info.get("nccl")), ("nvshmem", info.get("nvshmem")), ("mpi", info.get("mpi")),
        ("cupy", info.get("cupy")), ("cuda-core", info.get("cuda_core")), ("cuda-bindings", info.get("cuda_bindings")),
        ("multicast supported", mc if mc is not None else "unknown"),
        ("kill switches", info.get("kill_switches") or "none set"),
    ):
        facts.add_row(Text(key, style="bold"), _fmt(value))
    parts: list[Any] = [facts]
    if info.get("gpus"):
        links = {g["index"]: g for g in info.get("nvlink") or []}
        table = Table(title="GPUs")
        for col in ("#", "name", "memory MiB", "cc", "PCI bus", "NVLink active/links", "uuid"):
            table.add_column(col)
        for g in info["gpus"]:
            link = links.get(g.get("index"))
            table.add_row(*(_fmt(v) for v in (
                g.get("index"), g.get("name"), g.get("memory_total_mib"), g.get("compute_capability"),
                g.get("pci_bus_id"), f"{link['active']}/{link['links']}" if link else None, g.get("uuid"))))
        parts.append(table)
    else:
        parts.append(Text("GPUs: none visible (no nvidia-smi or CUDA driver)"))
    parts += _links_tables(info.get("links"))
    if info.get("topology"):
        parts.append(Text("topology (nvidia-smi topo -m):\n" + info["topology"]))
    return Group(*parts)


def _links_tables(links: Any) -> list[Any]:
    """The node's links and their limits (sysinfo/links.py), or why they could not be read."""
    from rich.table import Table
    from rich.text import Text

    from .links_table import gpu_rows, nic_rows

    parts: list[Any] = []
    for title, rows in (("links and their limits (bounds: docs/metrics.md)", gpu_rows(links)),
                        ("network adapters", nic_rows(links))):
        if rows:
            table = Table(title=title)
            for col in rows[0]:
                table.add_column(col)
            for row in rows:
                table.add_row(*row.values())
            parts.append(table)
    for problem in (links or {}).get("problems") or []:
        parts.append(Text(f"links: {problem}"))
    return parts
