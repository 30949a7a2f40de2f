"""GPU health over a burn-in's passes: each GPU's counters pass by pass, with the time each moved
(health.jsonl, docs/results.md, read through analysis/health_view.py; the passes from the rows'
``pass`` and ``pass_utc``, analysis/burnin.py). Read by the report's burn-in section.

A launch belongs to the pass during which it started: pass k runs from the end of pass k-1 (its
rows' ``pass_utc``) to its own end; records after the last stamped pass belong to the pass a kill
cut short (numbered one more). Per GPU and pass:

- cumulative counters, their value at the pass's last record: ``ecc_sbe`` and ``ecc_dbe`` (single-
  and double-bit errors over the card's life, ``aggregate_*``; the volatile ones where those are not
  available), ``rows_correctable`` and ``rows_uncorrectable`` (rows remapped);
- per pass: ``xids`` (XID events), ``throttled_ms`` (time held down by thermal or power-brake
  slowdown, start to end of each launch, summed), ``temp_max_c`` (the highest temperature read or
  sampled), ``pcie_gen`` (the lowest of each launch's highest generation seen).

Drift: a cumulative counter that grew, an XID in any pass, time throttled that grew from the first
pass to the last (or appeared), a temperature up by DRIFT_TEMP_C or more, a PCIe generation lower
than in the first pass; each with the passes where it moved and the record's time when it did.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from ..errors import RunFolderError
from ..sysinfo.health import is_available
from ..sysinfo.health_judge import DEFAULT_THROTTLE, GpuLaunch, delta, dig, seen_max
from .health_view import run_health

CUMULATIVE = {"ecc_sbe": ("ecc.aggregate_sbe", "ecc.volatile_sbe"),
              "ecc_dbe": ("ecc.aggregate_dbe", "ecc.volatile_dbe"),
              "rows_correctable": ("remapped_rows.correctable",),
              "rows_uncorrectable": ("remapped_rows.uncorrectable",)}
COUNTERS = tuple(CUMULATIVE) + ("xids", "throttled_ms", "temp_max_c", "pcie_gen")
LABELS = {"ecc_sbe": "ECC single-bit errors", "ecc_dbe": "ECC double-bit errors",
          "rows_correctable": "rows remapped (correctable)", "rows_uncorrectable": "rows remapped (uncorrectable)",
          "xids": "XID events", "throttled_ms": "time throttled, ms (thermal, power brake)",
          "temp_max_c": "highest temperature, C", "pcie_gen": "PCIe generation (highest seen)"}
DRIFT_TEMP_C = 5.0
MAX_MOVES_SHOWN = 4   # passes listed per counter that moved (the table says how many more)


def pass_ends(df: pd.DataFrame) -> list[tuple[int, float, str]]:
    """(pass, its end as Unix seconds, pass_utc) of every stamped pass, in order."""
    if df.empty or "pass_utc" not in df.columns:
        return []
    out = []
    for p, utc in df.dropna(subset=["pass_utc"]).groupby("pass")["pass_utc"].first().items():
        try:
            when = datetime.fromisoformat(str(utc))
        except ValueError:
            continue
        when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
        out.append((int(p), when.timestamp(), str(utc)))
    return sorted(out)


def _pass_of(t: float, ends: list[tuple[int, float, str]]) -> int:
    for p, end, _utc in ends:
        if t <= end:
            return p
    return (ends[-1][0] + 1) if ends else 1


def _number(value):
    return value if is_available(value) and isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _launch_values(g: GpuLaunch) -> dict:
    """One launch of one GPU: its counters (None: not available) and the time of its last record."""
    last = g.end or g.start
    out = {"t": float(last["t"]), "time_utc": str(last.get("time_utc", ""))}
    for key, paths in CUMULATIVE.items():
        out[key] = next((v for p in paths if (v := _number(dig(last, p))) is not None), None)
        out[f"{key}_from"] = next((v for p in paths if (v := _number(dig(g.start, p))) is not None), None)
    out["xids"] = len(g.xids())
    first_xid = next((e for e in g.events if e.get("event") == "xid"), None)   # the event's own time
    out["xids_at"] = str(first_xid.get("time_utc", "")) if first_xid else out["time_utc"]
    held = [_number(delta(g, f"throttle_ns.{r}")) for r in DEFAULT_THROTTLE]
    out["throttled_ms"] = sum(v for v in held if v) / 1e6 if any(v is not None for v in held) else None
    temps = [_number(dig(r, k)) for r in (g.start, g.end) for k in ("temperature_c", "during.temperature_c_max")]
    temps = [t for t in temps if t is not None]
    out["temp_max_c"] = max(temps) if temps else None
    out["pcie_gen"] = _number(seen_max(g, "gen", "pcie_gen_max"))
    return out


def health_per_pass(run_dir: Path, df: pd.DataFrame, warn=None) -> pd.DataFrame:
    """node, gpu, pass, pass_utc, the COUNTERS and, per counter, ``<counter>_utc``: the time of the
    record that gave the pass its value. Empty without health records."""
    try:
        view = run_health(Path(run_dir), warn)
    except RunFolderError as exc:
        if warn is not None:
            warn(str(exc))
        return pd.DataFrame()
    if not view.judged:
        return pd.DataFrame()
    ends = pass_ends(df)
    utc = {p: u for p, _e, u in ends}
    launches = []
    for g in view.gpus:
        start = g.start or g.end
        if start is None:
            continue
        values = _launch_values(g)
        launches.append({"node": g.host, "gpu": g.gpu, "pass": _pass_of(float(start["t"]), ends), **values})
    if not launches:
        return pd.DataFrame()
    per = pd.DataFrame(launches).sort_values("t")
    rows = [_one_pass(node, gpu, p, part, utc.get(p, "not stamped (cut short)"))
            for (node, gpu, p), part in per.groupby(["node", "gpu", "pass"], sort=True)]
    return pd.DataFrame(rows)


def _one_pass(node, gpu, p, part: pd.DataFrame, pass_utc: str) -> dict:
    out = {"node": node, "gpu": int(gpu), "pass": int(p), "pass_utc": pass_utc}
    for key in CUMULATIVE:   # the pass's first value: a counter that grew within the first pass shows
        start = part[f"{key}_from"].dropna()
        out[f"{key}_from"] = float(start.iloc[0]) if len(start) else None
    for key in COUNTERS:
        col = part[key].dropna() if key in part else pd.Series(dtype=float)
        if col.empty:
            out[key], out[f"{key}_utc"] = None, ""
            continue
        if key in ("xids", "throttled_ms"):
            value = float(col.sum())
            at = part.loc[col[col > 0].index, "xids_at" if key == "xids" else "time_utc"]
        elif key == "pcie_gen":
            value = float(col.min())
            at = part.loc[col[col == value].index, "time_utc"]
        else:   # cumulative and temperature: the highest, first reached at
            value = float(col.max())
            at = part.loc[col[col == value].index, "time_utc"]
        out[key], out[f"{key}_utc"] = value, (str(at.iloc[0]) if len(at) else "")
    return out


def health_drift(table: pd.DataFrame) -> pd.DataFrame:
    """One line per (node, GPU, counter) that moved over the passes: first, last, the passes where
    it moved with their health record's time, and the pass's end."""
    if table.empty:
        return pd.DataFrame()
    out = []
    for (node, gpu), part in table.sort_values("pass").groupby(["node", "gpu"], sort=True):
        for key in COUNTERS:
            cols = ["pass", key, f"{key}_utc", "pass_utc"] + ([f"{key}_from"] if key in CUMULATIVE else [])
            series = part[cols].dropna(subset=[key])
            moves = _moves(key, series)
            if not moves:
                continue
            shown = "; ".join(f"pass {p} ({'+' if d > 0 else ''}{d:g}, at {at or 'n/a'}; pass ended {end})"
                              for p, d, at, end in moves[:MAX_MOVES_SHOWN])
            if len(moves) > MAX_MOVES_SHOWN:
                shown += f"; and {len(moves) - MAX_MOVES_SHOWN} more pass(es)"
            out.append({"node": node, "gpu": gpu, "counter": LABELS[key], "passes": len(series),
                        "first": series[key].iloc[0], "last": series[key].iloc[-1],
                        "moved in": shown})
    return pd.DataFrame(out)


def _moves(key: str, s: pd.DataFrame) -> list[tuple[int, float, str, str]]:
    """(pass, change, record time, pass end) where ``key`` moved the wrong way."""
    if s.empty:
        return []
    vals = list(s[key])
    rows = list(s.itertuples(index=False))
    if key == "xids":
        return [(r[0], v, r[2], r[3]) for r, v in zip(rows, vals) if v > 0]
    if key == "throttled_ms":
        grew = vals[-1] > vals[0] or (len(vals) == 1 and vals[0] > 0)
        return [(r[0], v - vals[0], r[2], r[3]) for r, v in zip(rows[1:], vals[1:]) if v > vals[0]] if grew else []
    if key == "temp_max_c":
        return [(r[0], v - vals[0], r[2], r[3]) for r, v in zip(rows[1:], vals[1:]) if v - vals[0] >= DRIFT_TEMP_C]
    if key == "pcie_gen":
        return [(r[0], v - vals[0], r[2], r[3]) for r, v in zip(rows[1:], vals[1:]) if v < vals[0]]
    start = s[f"{key}_from"].iloc[0]   # cumulative: against the previous pass, the first against its start
    before = [start if start == start and start is not None else vals[0]] + vals[:-1]
    return [(r[0], b - a, r[2], r[3]) for r, a, b in zip(rows, before, vals) if b > a]
