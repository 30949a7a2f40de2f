"""The ceiling of each row: ``bound_gbps`` (the most busbw the links it crossed can carry),
``bound_link`` (which link limits), ``bound_reason`` (why there is none, or what was assumed)
and ``pct_of_bound`` (busbw / bound x 100), from the rows and run.json's ``links``.

busbw is normalised so that a ring's ceiling is the slowest link's one-way bandwidth
(docs/metrics.md), so for most ops the bound is that link: NVLink (else PCIe) within a node, the
node's NICs between nodes, HBM / 2 for a copy on one GPU. The rules per op and their sources are
in docs/metrics.md ("Bounds"). Nothing here raises on a row: a bound that cannot be computed is
empty and the reason says why.
"""
from __future__ import annotations

import math
from typing import Mapping

import pandas as pd

from . import bound_limits as lim
from .bound_copy import copy_bound
from .bound_limits import BOUND_COLUMNS, Limit, NoLimit
from .rehearsal import ranks_per_gpu, shared_reason
from ..comm.ops import OPS

__all__ = ["BOUND_COLUMNS", "row_bound", "with_bounds", "with_bounds_runs"]
HOST_BACKENDS = ("gloo", "mpi")
NO_BOUND_FAMILIES = {"harness": "the harness family measures no bandwidth",
                     "proxy": "the proxy family's traffic is GPU-host commands, not a bus bound here"}
EGRESS_FAMILIES = ("moe", "training")      # busbw = bytes leaving a rank / time
P2P_OPS = ("put", "get", "p", "put_signal", "atomic_fetch_add", "put_latency", "get_latency", "pingpong")


def _num(row: Mapping, key: str, default: float | None = None) -> float | None:
    try:
        v = float(row.get(key))
    except (TypeError, ValueError):
        return default
    return v if math.isfinite(v) else default


def _algo(row: Mapping) -> str:
    algo = str(row.get("nccl_algo") or "").strip()
    return "" if algo.lower() in ("nan", "none") else algo


def _ring_only(row: Mapping) -> bool:
    """An all_reduce known to move its data as a ring does (reduce-scatter then all-gather):
    NCCL's Ring, or commbench's own all-reduce without multicast (one-shot moves more)."""
    if row.get("family") == "allreduce":
        return str(row.get("allow_multicast", "")).lower() in ("false", "0")
    return _algo(row).lower() == "ring"


def _within_node(row: Mapping, links: dict, n: int) -> Limit:
    link = lim.gpu_link(links)
    op = str(row.get("op"))
    if op == "all_reduce" and not _ring_only(row):
        # Tree, NVLS (the switch reduces) or an algorithm not recorded: whatever the algorithm,
        # each GPU must receive the whole result once, so busbw (2(n-1)/n x S/t) <= 2(n-1)/n x link.
        algo = _algo(row).lower()
        nvls = "nvls" in algo or (not algo and bool(links.get("multicast")) and link.link.startswith("nvlink"))
        return Limit(link.gbps * 2 * (n - 1) / n, link.link + (" nvls" if nvls else " any-algo"))
    if op in P2P_OPS and str(row.get("direction", "")) == "bi":
        return Limit(link.gbps * 2, link.link + " both ways")
    return link


def _between_nodes(row: Mapping, links: dict, n: int, nodes: int, per_node: int) -> Limit:
    """The node's NICs, normalised like busbw: a ring's traffic out of a node is spread over the
    NICs of the GPUs it uses, so busbw <= what those NICs carry together."""
    nics = lim.node_nics(links, per_node)
    op = str(row.get("op"))
    spread = nodes * (n - 1) / (n * (nodes - 1))          # the share of the buffer that must leave a node
    if op == "all_reduce":
        if _ring_only(row):
            return Limit(nics.used, nics.link)
        # Tree or in-network reduction (SHARP): a node sends and receives at least the buffer once.
        return Limit(nics.used * 2 * (n - 1) / n, nics.link + " tree")
    if op in ("alltoall", "alltoallv"):   # alltoallv: its busiest rank, whose own block is 1/n of what it moves
        return Limit(nics.used / per_node * spread, nics.link)
    if op in ("gather", "scatter"):
        return Limit(nics.used * spread, nics.link)
    if op in P2P_OPS or row.get("family") in EGRESS_FAMILIES:
        per_gpu = nics.per_gpu * (2 if str(row.get("direction", "")) == "bi" else 1)
        if row.get("family") in EGRESS_FAMILIES:   # a rank's bytes leave over NVLink and its NICs
            return Limit(lim.gpu_link(links).gbps + per_gpu, f"{lim.gpu_link(links).link}+{nics.link}")
        return Limit(per_gpu, nics.link)
    return Limit(nics.used, nics.link)                      # rings: all_gather, reduce_scatter, ...


def _one_rank(row: Mapping, links: dict) -> tuple[Limit | None, str]:
    op = str(row.get("op"))
    if op in OPS and OPS[op].bus_factor(1) == 0:
        return None, "one rank: busbw is 0 by definition (no bus traffic)"
    if str(row.get("in_place", "")).lower() in ("true", "1") and op in OPS:
        return None, "one rank in place: nothing has to move"
    if op in OPS or op in P2P_OPS:   # out-of-place broadcast, reduce, sendrecv or a put to itself: a device copy
        hbm = lim.hbm(links)
        return Limit(hbm.gbps / 2, hbm.link), "a copy within one GPU reads and writes HBM: bound = HBM / 2"
    return None, "one rank: no link is crossed"


def row_bound(row: Mapping, links: dict | None) -> tuple[Limit | None, str]:
    """(the row's limit, the reason: why none, or what the bound assumes)."""
    family, backend = str(row.get("family", "")), str(row.get("backend", ""))
    shared = ranks_per_gpu(row.get("ranks_per_gpu"))
    if shared > 1:
        return None, "no bound: " + shared_reason(shared)
    if family in NO_BOUND_FAMILIES:
        return None, NO_BOUND_FAMILIES[family]
    if family == "copy":   # the row's own GPU or GPU pair (analysis/bound_copy.py)
        return copy_bound(row, links)
    if backend in HOST_BACKENDS:
        return None, f"backend {backend} moves host memory: no GPU link bound"
    op = str(row.get("op"))
    if op not in OPS and op not in P2P_OPS and family not in EGRESS_FAMILIES:
        return None, f"no bound rule for {family} {op}"
    n = int(_num(row, "world_size", 1) or 1)
    nodes = int(_num(row, "num_nodes", 1) or 1)
    per_node = int(_num(row, "ranks_per_node", n / nodes) or max(1, n // nodes))
    try:
        if n <= 1:
            return _one_rank(row, links or {})
        inside = _within_node(row, links or {}, n)
        if nodes <= 1:
            return inside, _note(inside)
        between = _between_nodes(row, links, n, nodes, per_node)
        limit = between if between.gbps <= inside.gbps else inside
        railed = lim.node_nics(links, per_node).railed
        return limit, "; ".join(filter(None, (_note(limit), "" if railed else
                                              "NIC affinity unknown: every NIC of the node counted for the GPUs used")))
    except NoLimit as exc:
        return None, str(exc)


def _note(limit: Limit) -> str:
    """What a bound assumed, when it is not the plain link."""
    if limit.link.endswith((" any-algo", " nvls", " tree")):
        return ("all_reduce not known to run as a ring (nccl_algo): bounded for any algorithm, each GPU "
                "(node) receiving the result once; NCCL_ALGO=Ring or --profile nccl gives the ring bound")
    return ""


def with_bounds(rows: pd.DataFrame, meta: dict | None) -> pd.DataFrame:
    """``rows`` with the bound columns added (one run: its run.json ``meta``)."""
    out = rows.copy()
    links = (meta or {}).get("links")
    found = [row_bound(row.to_dict(), links) for _, row in out.iterrows()]
    out["bound_gbps"] = [round(lim_.gbps, 2) if lim_ else math.nan for lim_, _ in found]
    out["bound_link"] = [lim_.link if lim_ else "" for lim_, _ in found]
    out["bound_reason"] = [reason for _, reason in found]
    busbw = pd.to_numeric(out["busbw_gbps"], errors="coerce") if "busbw_gbps" in out else math.nan
    out["pct_of_bound"] = (busbw / out["bound_gbps"] * 100).round(1)
    return out


def with_bounds_runs(runs: list) -> pd.DataFrame:
    """Every run's rows with their bounds (each run by its own run.json), with a 'run' column
    when there are several."""
    frames = []
    for run in runs:
        df = with_bounds(run.results, run.meta)
        if len(runs) > 1:
            df.insert(0, "run", run.label)
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
