"""The MoE layer view (the report's section: sections/moe_layer.py): per model and phase, a bar per
backend split into dispatch / experts / combine (each timed alone), with the two-batch overlapped
layer time beside it, and the table the bars are drawn from."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

PARTS = (("dispatch_us", "dispatch", "#4c72b0"), ("expert_us", "experts", "#55a868"),
         ("combine_us", "combine", "#c44e52"))
PANEL_KEYS = ("model", "phase", "dtype", "world_size")
# what else may tell two layers of one backend apart in a panel (runs overlaid, a routing or token
# sweep, events vs graph timing): a bar of its own, labelled, when it varies
BAR_KEYS = ("run", "routing", "timing", "tokens_per_rank", "tokens", "hidden", "experts", "topk",
            "intermediate", "num_sms", "gemm")
SHOWN = ("model", "phase", "backend", "dtype", "world_size", "overlap", "tokens_per_rank",
         "layer_us", "dispatch_us", "expert_us", "combine_us", "serial_us", "comm_share",
         "overlap_gain", "tokens_per_s", "grouped_gemm", "max_token_err", "wrong")
NUMERIC = ("layer_us", "dispatch_us", "expert_us", "combine_us", "serial_us", "comm_share",
           "overlap_gain", "tokens_per_s", "max_token_err")


def layer_rows(df: pd.DataFrame) -> pd.DataFrame:
    """ok rows of the moe layer op that carry the layer columns."""
    if df.empty or "op" not in df.columns or "layer_us" not in df.columns:
        return df.iloc[0:0]
    rows = df[(df["op"].astype(str) == "layer") & (df["status"].astype(str) == "ok")].copy()
    for col in NUMERIC:
        if col in rows.columns:
            rows[col] = pd.to_numeric(rows[col], errors="coerce")
    for col in ("model", "phase", "overlap"):
        if col not in rows.columns:
            rows[col] = ""
    return rows


def layer_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = layer_rows(df)
    if rows.empty:
        return rows
    order = [c for c in ("model", "phase", "dtype", "world_size", "backend", "overlap")
             if c in rows.columns]
    rows = rows.sort_values(order)
    out = rows[[c for c in SHOWN if c in rows.columns]].copy()
    for col in NUMERIC:
        if col in out.columns:
            out[col] = out[col].round(3)
    return out.reset_index(drop=True)


def _panel_keys(rows: pd.DataFrame) -> list[str]:
    """model and phase always; dtype and world size when they vary."""
    keys = ["model", "phase"]
    keys += [k for k in PANEL_KEYS[2:] if k in rows.columns and rows[k].astype(str).nunique() > 1]
    return keys


def _bar_keys(panel: pd.DataFrame) -> list[str]:
    keys = [k for k in BAR_KEYS if k in panel.columns and panel[k].astype(str).nunique() > 1]
    return [k for k in keys if not (k == "tokens" and "tokens_per_rank" in keys)]


def _bars(panel: pd.DataFrame) -> list[dict]:
    """One entry per backend (and per value of whatever else varies in the panel: run, routing,
    timing, ...): the parts (from the overlap=none row when there is one) and the overlapped
    layer time (two_batch row), either may be missing."""
    out = []
    extra = _bar_keys(panel)
    keyed = panel.assign(**{f"_k_{k}": panel[k].astype(str) for k in extra})
    for key, g in keyed.groupby(["backend", *[f"_k_{k}" for k in extra]], sort=True):
        key = key if isinstance(key, tuple) else (key,)
        backend = key[0]
        serial = g[g["overlap"].astype(str) != "two_batch"]
        tb = g[g["overlap"].astype(str) == "two_batch"]
        parts_row = serial.iloc[0] if not serial.empty else tb.iloc[0]
        label = "\n".join([str(backend), *(v if k in ("run", "routing", "timing") else f"{k}={v}"
                                            for k, v in zip(extra, key[1:]))])
        out.append({"backend": str(backend), "label": label,
                    "parts": [float(parts_row[c]) if c in parts_row else 0.0 for c, _, _ in PARTS],
                    "layer": float(serial.iloc[0]["layer_us"]) if not serial.empty else None,
                    "overlapped": float(tb.iloc[0]["layer_us"]) if not tb.empty else None})
    return out


def layer_figure(df: pd.DataFrame):
    """A panel per (model, phase[, dtype, world size]); None without layer rows."""
    rows = layer_rows(df)
    if rows.empty:
        return None
    keys = _panel_keys(rows)
    panels = list(rows.groupby(keys, sort=True))
    ncols = min(2, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.4 * ncols, 4.0 * nrows), squeeze=False)
    for ax, (key, panel) in zip(axes.flat, panels):
        key = key if isinstance(key, tuple) else (key,)
        bars = _bars(panel)
        xs = range(len(bars))
        bottom = [0.0] * len(bars)
        for i, (_, label, color) in enumerate(PARTS):
            vals = [b["parts"][i] for b in bars]
            ax.bar([x - 0.2 for x in xs], vals, 0.4, bottom=bottom, color=color, label=label)
            bottom = [b + v for b, v in zip(bottom, vals)]
        lay = [b["layer"] for b in bars]
        if any(v is not None for v in lay):
            ax.scatter([x - 0.2 for x, v in zip(xs, lay) if v is not None],
                       [v for v in lay if v is not None], marker="_", s=400, color="black",
                       zorder=3, label="layer (serial)")
        over = [b["overlapped"] for b in bars]
        if any(v is not None for v in over):
            ax.bar([x + 0.2 for x, v in zip(xs, over) if v is not None],
                   [v for v in over if v is not None], 0.4, color="#8172b2", hatch="//",
                   label="layer, two_batch")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([b["label"] for b in bars], rotation=30, ha="right", fontsize=7)
        ax.set_ylabel("time (us)")
        ax.set_title(" ".join(f"{k}={v}" if k in ("dtype", "world_size") else str(v)
                              for k, v in zip(keys, key)))
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig

