"""Report tables as plain DataFrames: summary, per-op points, warnings, metadata."""
from __future__ import annotations

import re
import shlex

import pandas as pd

from commbench.sysinfo.machine import is_secret
from commbench.ui import SMALL_MESSAGE_BYTES, small_message_pick, split_columns  # noqa: F401 (sections read it here)
from commbench.units import format_size

# A point is unstable when its p90 is more than this factor above its median:
# the median then hides a tail a user would feel (pyperf warns at std > 10% of the mean).
UNSTABLE_P90_OVER_MEDIAN = 1.25
# "Small message" latency: the largest measured size up to SMALL_MESSAGE_BYTES (commbench.ui
# holds the rule, so the end-of-run table reads the same row).
GROUP = ["op", "backend", "variant"]
META_KEYS = ("suite", "started_utc", "finished_utc", "command", "commbench_version",
             "git_revision", "hostname", "hosts", "os", "gpus", "driver", "cuda", "cuda_driver",
             "cuda_runtime", "torch", "nccl", "nvshmem", "mpi", "topology", "multicast_supported",
             "kill_switches", "reference")


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["status"] == "ok"] if "status" in df.columns else df.iloc[0:0]


def _group_cols(df: pd.DataFrame, with_run: bool) -> list[str]:
    cols = (["run"] if with_run and "run" in df.columns else []) + [c for c in GROUP if c in df.columns]
    return cols + split_columns(df)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per (run, op, backend, variant): best busbw with its size, and small-message latency."""
    ok = _ok(df)
    cols = _group_cols(df, with_run=True)
    out = []
    for key, g in ok.groupby(cols, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        rec = dict(zip(cols, key))
        best = g.loc[g["busbw_gbps"].idxmax()] if g["busbw_gbps"].notna().any() else None
        rec["best_busbw_gbps"] = round(float(best["busbw_gbps"]), 2) if best is not None else None
        rec["at_size"] = format_size(int(best["size_bytes"])) if best is not None else ""
        row = g.iloc[small_message_pick(g["size_bytes"].tolist())]
        rec["small_msg_time_us"] = round(float(row["time_us"]), 2)
        rec["small_msg_size"] = format_size(int(row["size_bytes"]))
        rec["points_ok"] = len(g)
        out.append(rec)
    return pd.DataFrame(out)


def tail_columns(df: pd.DataFrame) -> list[str]:
    """The tail beside the median: time_us_p99 where the rows have it, time_us_p90 for rows
    without it (older folders, nccl-tests tables imported without -I)."""
    p99 = "time_us_p99" in df.columns and df["time_us_p99"].notna().any()
    if not p99:
        return ["time_us_p90"]
    return ["time_us_p99"] + (["time_us_p90"] if df["time_us_p99"].isna().any() else [])


def points(df: pd.DataFrame) -> pd.DataFrame:
    """All rows in reading order with sizes as labels (the 'tables' section)."""
    cols = [c for c in ("run", "op", "backend", "variant", "dtype", "in_place", "world_size", "timing")
            if c in df.columns]
    shown = cols + ["size", "time_us", *tail_columns(df), "algbw_gbps", "busbw_gbps", "wrong", "status"]
    out = df.sort_values(cols + ["size_bytes"]).copy()
    out["size"] = out["size_bytes"].map(lambda s: format_size(int(s)) if pd.notna(s) else "")
    return out[[c for c in shown if c in out.columns]].reset_index(drop=True)


def size_distribution(df: pd.DataFrame) -> pd.DataFrame:
    """Per op and size, the spread of its ok points (too many to list one by one: a fleet's nodes,
    a long sweep): how many, time_us p5 / median / p95 / max, busbw_gbps min / p5 / median."""
    ok = _ok(df)
    if ok.empty:
        return pd.DataFrame()
    g = ok.groupby(["op", "size_bytes"], sort=True)
    time_q = g["time_us"].quantile([0.05, 0.5, 0.95]).unstack()
    bus_q = g["busbw_gbps"].quantile([0.05, 0.5]).unstack()
    out = pd.DataFrame({"points": g.size(), "time_us_p5": time_q[0.05], "time_us_median": time_q[0.5],
                        "time_us_p95": time_q[0.95], "time_us_max": g["time_us"].max(),
                        "busbw_gbps_min": g["busbw_gbps"].min(), "busbw_gbps_p5": bus_q[0.05],
                        "busbw_gbps_median": bus_q[0.5]}).round(3).reset_index()
    out.insert(2, "size", out.pop("size_bytes").map(lambda s: format_size(int(s))))
    return out


def unstable(df: pd.DataFrame, factor: float = UNSTABLE_P90_OVER_MEDIAN, params=()) -> pd.DataFrame:
    """ok rows whose p90 exceeds factor x median time (with every parameter that tells them apart)."""
    ok = _ok(df)
    if ok.empty or "time_us_p90" not in ok.columns:
        return ok.iloc[0:0]
    bad = ok[(ok["time_us"] > 0) & (ok["time_us_p90"] > factor * ok["time_us"])].copy()
    bad["p90_over_median"] = (bad["time_us_p90"] / bad["time_us"]).round(2)
    p99 = ["time_us_p99"] if "time_us_p99" in tail_columns(ok) else []
    shown = ["time_us", "time_us_p90", "p90_over_median", *p99]
    return _brief(bad, shown, df, params)


def wrong_rows(df: pd.DataFrame, params=()) -> pd.DataFrame:
    if "wrong" not in df.columns:
        return df.iloc[0:0]
    return _brief(df[df["wrong"] > 0], ["wrong", "status", "reason"], df, params)


def not_ok_rows(df: pd.DataFrame, params=()) -> pd.DataFrame:
    """Every skipped, failed and timeout row, with its reason."""
    if "status" not in df.columns:
        return df.iloc[0:0]
    return _brief(df[df["status"].isin(["skipped", "failed", "timeout"])], ["status", "reason"], df, params)


# Besides the run's own parameter columns, what may tell two points of one op and size apart.
TELLING = ("in_place", "timing", "num_nodes", "ranks_per_node", "hosts")   # hosts: the node or pair of a placed run


def _brief(df: pd.DataFrame, tail: list[str], whole: pd.DataFrame | None = None, params=()) -> pd.DataFrame:
    """Rows named by op, backend, variant, dtype, world size and every other parameter column that
    varies over ``whole`` (else two rows that differ only there would look like one row twice)."""
    head = [c for c in ("run", "op", "backend", "variant", "dtype", "world_size") if c in df.columns]
    whole = df if whole is None else whole
    for col in dict.fromkeys([*TELLING, *params]):
        if col not in head and col in df.columns and col not in tail and col != "size_bytes" \
                and whole[col].astype(str).nunique() > 1:
            head.append(col)
    out = df.copy()
    out["size"] = out["size_bytes"].map(lambda s: format_size(int(s)) if pd.notna(s) else "")
    return out[head + ["size"] + [c for c in tail if c in out.columns]].reset_index(drop=True)


def readable(value) -> str:
    """A run.json value as a person reads it, never a Python repr: a list as "a, b", a mapping as
    "key value, ...", a list of mappings (GPUs) one per "; ", identical ones counted ("2x ...")."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={readable(v)}" for k, v in value.items() if v not in (None, "", [], {}))
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, dict) for v in value):
            texts = [readable({k: v for k, v in item.items() if k not in ("index", "uuid", "pci_bus_id")})
                     for item in value]
            counted = dict.fromkeys(texts)
            return "; ".join(t if texts.count(t) == 1 else f"{texts.count(t)}x {t}" for t in counted)
        return ", ".join(readable(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _topology(text: str) -> str:
    """nvidia-smi topo -m's matrix without its terminal colour codes, tabs or legend."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text).split("Legend:")[0]
    return " / ".join(" ".join(line.split()) for line in text.splitlines() if line.strip())


def metadata(meta: dict) -> pd.DataFrame:
    """Run metadata as (field, value) rows, plus the filtered environment."""
    rows = []
    for key in META_KEYS:
        if key in meta and meta[key] not in (None, "", [], {}):
            value = meta[key]
            if key == "command" and isinstance(value, list):
                text = shlex.join(map(str, value))
            elif key == "topology" and isinstance(value, str):
                text = _topology(value)
            else:
                text = readable(value)
            rows.append((key, text))
    env = meta.get("env") if isinstance(meta.get("env"), dict) else {}
    withheld = [str(k) for k in meta.get("env_withheld") or [] if isinstance(k, str)]
    for k, v in sorted(env.items(), key=lambda kv: str(kv[0])):
        if is_secret(k, v):   # a run.json written before a rule (or a site's names and patterns)
            withheld.append(str(k))
            continue
        rows.append((f"env {k}", str(v)))
    if withheld:
        rows.append(("env withheld", ", ".join(sorted(set(withheld)))
                     + " (names that look like credentials; their values are never recorded)"))
    for launch in meta.get("launches") or []:
        rows.append((f"launch {launch.get('launch_id', launch.get('id'))}",
                     f"ranks={launch.get('ranks')} status={launch.get('status')} "
                     f"wall_s={launch.get('wall_s')} {launch.get('reason') or ''}".strip()))
    return pd.DataFrame(rows, columns=["field", "value"])
