"""The copy family's rows as nvbandwidth shows them: a matrix of GPU pairs (source rows,
destination columns) per op, engine and size, and per GPU the host and device copies. Read by the
report's copy section and by accept (a slow pair named by its GPUs).
"""
from __future__ import annotations

import math

import pandas as pd

from ..units import format_size

PAIR_OPS = ("p2p", "bidir")
ONE_GPU_OPS = ("h2d", "d2h", "d2d")
GROUP_KEY = ("run", "op", "engine", "memory")   # one matrix (or table line) per these, where present
NUMBERS = ("gpu", "peer", "size_bytes", "busbw_gbps", "bound_gbps", "pct_of_bound")


def copy_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The ok rows of the copy family, their GPU indices and numbers as numbers."""
    if df.empty or "family" not in df.columns or "status" not in df.columns:
        return df.iloc[0:0]
    rows = df[(df["family"].astype(str) == "copy") & (df["status"].astype(str) == "ok")].copy()
    for col in NUMBERS:
        if col in rows.columns:
            rows[col] = pd.to_numeric(rows[col], errors="coerce")
    return rows


def _index(value) -> int | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return int(v) if math.isfinite(v) and v >= 0 else None


def pair_label(row) -> str:
    """'GPU 2 -> GPU 5' (p2p), 'GPU 2 <-> GPU 5' (bidir), 'GPU 2' (a copy on one GPU)."""
    gpu, peer = _index(row.get("gpu")), _index(row.get("peer"))
    if peer is None:
        return f"GPU {gpu}"
    return f"GPU {gpu} {'<->' if str(row.get('op')) == 'bidir' else '->'} GPU {peer}"


def _largest(rows: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """Per group of ``key``, the rows at the group's largest size (a matrix shows one size)."""
    if rows.empty:
        return rows
    top = rows.groupby(key, dropna=False)["size_bytes"].transform("max")
    return rows[rows["size_bytes"] == top]


def pair_groups(df: pd.DataFrame) -> list[tuple[dict, pd.DataFrame]]:
    """(what the matrix is, its rows) per run, op, engine: the pair rows at the largest size."""
    rows = copy_rows(df)
    rows = rows[rows["op"].astype(str).isin(PAIR_OPS)] if not rows.empty else rows
    if rows.empty or "peer" not in rows.columns:
        return []
    key = [c for c in GROUP_KEY if c in rows.columns]
    rows = _largest(rows, key)
    out = [(dict(zip(key, values if isinstance(values, tuple) else (values,))), group)
           for values, group in rows.groupby(key, sort=True, dropna=False)]
    return sorted(out, key=lambda wg: PAIR_OPS.index(str(wg[0]["op"])))   # p2p first, then bidir (stable)


def matrix(group: pd.DataFrame, value: str = "busbw_gbps") -> pd.DataFrame:
    """Source GPU x destination GPU of ``value`` (the median where a pair has several rows);
    every GPU that appears is both a row and a column, cells without a row are NaN."""
    if group.empty or value not in group.columns:
        return pd.DataFrame()
    gpus = sorted({int(g) for g in pd.concat([group["gpu"], group["peer"]]).dropna()})
    cells = group.groupby(["gpu", "peer"])[value].median()
    out = pd.DataFrame(math.nan, index=gpus, columns=gpus)
    for (src, dst), v in cells.items():
        out.loc[int(src), int(dst)] = v
    out.index.name, out.columns.name = "from GPU", "to GPU"
    return out


def one_gpu_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per GPU, op, engine and host memory, the row at the largest size: busbw against its bound."""
    rows = copy_rows(df)
    rows = rows[rows["op"].astype(str).isin(ONE_GPU_OPS)] if not rows.empty else rows
    if rows.empty:
        return pd.DataFrame()
    key = [c for c in (*GROUP_KEY, "gpu") if c in rows.columns]
    rows = _largest(rows, key).copy()
    if "memory" in rows.columns:   # host memory means nothing to a copy within a GPU
        rows.loc[rows["op"].astype(str) == "d2d", "memory"] = ""
    rows["_op"] = rows["op"].astype(str).map(ONE_GPU_OPS.index)
    order = [c for c in ("run", "gpu", "_op", "engine", "memory") if c in rows.columns]
    rows = rows.sort_values(order)
    rows["size"] = [format_size(int(v)) for v in rows["size_bytes"]]
    cols = [c for c in (*key, "size", "busbw_gbps", "bound_gbps", "bound_link", "pct_of_bound", "wrong")
            if c in rows.columns]
    return rows[cols].reset_index(drop=True)
