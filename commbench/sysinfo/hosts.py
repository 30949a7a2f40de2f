"""The hosts a run may place launches on (for per-node and pairwise placement).

COMMBENCH_HOSTS (comma-separated) wins; inside a Slurm allocation the job's
node list is used; otherwise this host alone.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess

from ..world import slurm_job_nodelist


def allocation_hosts() -> list[str]:
    """COMMBENCH_HOSTS, else the Slurm job's nodes (expanded by scontrol), else this host."""
    listed = os.environ.get("COMMBENCH_HOSTS", "").strip()
    if listed:
        return list(dict.fromkeys(h.strip() for h in listed.split(",") if h.strip()))
    nodelist = slurm_job_nodelist()
    if nodelist and shutil.which("scontrol"):
        try:
            out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                                 text=True, timeout=20, check=True).stdout
            hosts = [h for h in out.split() if h]
            if hosts:
                return hosts
        except (OSError, subprocess.SubprocessError):
            pass
    return [socket.gethostname()]


def round_robin_pairs(nodes: list[str]) -> list[list[tuple[str, str]]]:
    """Rounds of disjoint pairs (circle method) in which every pair of nodes meets exactly once."""
    ring = list(nodes) + ([None] if len(nodes) % 2 else [])
    n = len(ring)
    rounds = []
    for _ in range(n - 1):
        pairs = [(ring[i], ring[n - 1 - i]) for i in range(n // 2)]
        rounds.append([tuple(sorted(p)) for p in pairs if None not in p])
        ring = [ring[0], ring[-1], *ring[1:-1]]  # keep the first node fixed, rotate the rest
    return rounds
