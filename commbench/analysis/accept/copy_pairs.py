"""A rule over copy family rows that fails names what failed by its GPUs: 'GPU 2 -> GPU 5 p2p
ce 512MiB: 61.2', worst first, and the GPU every failing row shares when there is one (a slow GPU
rather than a slow pair). Rows of other families add nothing."""
from __future__ import annotations

import pandas as pd

from commbench.analysis.copy_matrix import pair_label
from commbench.units import format_size

MAX_NAMED = 8   # a reason stays one readable line: the worst rows, then how many more


def _gpus(row) -> set[int]:
    out = set()
    for col in ("gpu", "peer"):
        v = pd.to_numeric(pd.Series([row.get(col)]), errors="coerce").iloc[0]
        if pd.notna(v) and v >= 0:
            out.add(int(v))
    return out


def slow_pairs(rows: pd.DataFrame, metric: str, op: str, value: float) -> str:
    """'; 2 copy row(s) miss it: GPU 2 -> GPU 5 p2p ce 512MiB: 61.2, ...' for the copy rows whose
    ``metric`` misses ``op value`` (>= or <=); '' when none does."""
    if rows.empty or "family" not in rows.columns or metric not in rows.columns or op not in (">=", "<="):
        return ""
    copies = rows[rows["family"].astype(str) == "copy"]
    vals = pd.to_numeric(copies[metric], errors="coerce")
    miss = copies[vals < value] if op == ">=" else copies[vals > value]
    if miss.empty:
        return ""
    order = pd.to_numeric(miss[metric], errors="coerce").sort_values(ascending=op == ">=")
    named = []
    for idx in order.index[:MAX_NAMED]:
        r = miss.loc[idx]
        size = format_size(int(r["size_bytes"])) if pd.notna(r.get("size_bytes")) else ""
        words = (pair_label(r), r.get("op", ""), r.get("engine", ""), size)
        named.append(" ".join(str(w) for w in words if str(w)) + f": {order[idx]:.4g}")
    more = f" and {len(miss) - MAX_NAMED} more" if len(miss) > MAX_NAMED else ""
    text = f"; {len(miss)} copy row(s) miss it: {', '.join(named)}{more}"
    shared = set.intersection(*(_gpus(miss.loc[i]) for i in miss.index))
    if len(miss) > 1 and len(shared) == 1:
        text += f"; GPU {shared.pop()} is in every one"
    return text
