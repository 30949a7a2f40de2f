"""Compare two runs point by point: ratios NEW/BASE, Mann-Whitney U on samples, verdicts."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from commbench.runfolder.reader import Run, iteration_times
from commbench.units import format_size

KEY = ["family", "op", "backend", "variant", "dtype", "size_bytes", "world_size"]
# Optional columns that also tell points apart when both runs have them.
KEY_OPTIONAL = ["in_place"]
# Tell apart points that share the key within a run (a suite timing one op two ways, an
# imported nccl-tests run with and without -G); case_id only when these are not enough.
DISAMBIGUATE = ["timing"]
DEFAULT_THRESHOLD_PCT = 5.0
DEFAULT_ALPHA = 0.05
MIN_SAMPLES = 5  # fewer per side: the U test cannot reach p < 0.05, so do not claim significance


@dataclass(frozen=True)
class CompareSettings:
    """threshold_pct: smallest time change that counts; alpha: significance level of the U test."""

    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    alpha: float = DEFAULT_ALPHA


def _keys(base: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    keys = [k for k in KEY if k in base.columns and k in new.columns]
    keys += [k for k in KEY_OPTIONAL if k in base.columns and k in new.columns]
    def ambiguous() -> bool:
        return base.duplicated(keys).any() or new.duplicated(keys).any()

    for col in DISAMBIGUATE:
        if ambiguous() and col in base.columns and col in new.columns:
            keys.append(col)
    # A parameter sweep can give several rows per key: the stable case_id then separates them.
    if "case_id" in base.columns and "case_id" in new.columns and ambiguous():
        keys.append("case_id")
    return keys


def _mann_whitney(a: np.ndarray, b: np.ndarray) -> float | None:
    from scipy.stats import mannwhitneyu  # scipy only when comparing

    if len(a) < MIN_SAMPLES or len(b) < MIN_SAMPLES:
        return None
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def _samples_by_case(run: Run) -> dict[str, np.ndarray]:
    per_iter = iteration_times(run.samples)
    return {cid: g["time_us"].to_numpy(dtype=float) for cid, g in per_iter.groupby("case_id")}


def _verdict(time_ratio, p_value, settings: CompareSettings) -> str:
    change = abs(time_ratio - 1.0) * 100.0
    if change < settings.threshold_pct:
        return "unchanged"
    if p_value is not None and p_value >= settings.alpha:
        return "unchanged"  # the change is within the noise of the samples
    return "worse" if time_ratio > 1.0 else "better"


def compare_runs(base: Run, new: Run, settings: CompareSettings = CompareSettings()) -> pd.DataFrame:
    """One row per point present in either run: ratios, p-value, verdict (and why)."""
    keys = _keys(base.results, new.results)
    merged = base.results.merge(new.results, on=keys, how="outer", suffixes=("_base", "_new"),
                                indicator=True)
    s_base, s_new = _samples_by_case(base), _samples_by_case(new)
    out = []
    for row in merged.to_dict("records"):
        rec = {k: row[k] for k in keys if k != "case_id"}
        rec["size"] = format_size(int(rec["size_bytes"])) if "size_bytes" in rec else ""
        rec.update(time_base_us=row.get("time_us_base"), time_new_us=row.get("time_us_new"),
                   time_ratio=None, busbw_ratio=None, p_value=None, verdict="not comparable",
                   why="")
        if row["_merge"] != "both":
            rec["why"] = "only in " + ("base" if row["_merge"] == "left_only" else "new")
            out.append(rec)
            continue
        sb, sn = row.get("status_base", "ok"), row.get("status_new", "ok")
        tb, tn = row.get("time_us_base"), row.get("time_us_new")
        if sb != "ok" or sn != "ok":
            rec["why"] = f"status base={sb} new={sn}"
        elif not (tb and tn and tb > 0 and tn > 0) or math.isnan(tb) or math.isnan(tn):
            rec["why"] = "no positive time"
        else:
            rec["time_ratio"] = round(tn / tb, 4)
            bb, bn = row.get("busbw_gbps_base"), row.get("busbw_gbps_new")
            if bb and bn and bb > 0:
                rec["busbw_ratio"] = round(bn / bb, 4)
            cb, cn = str(row.get("case_id_base", row.get("case_id", ""))), str(row.get("case_id_new", row.get("case_id", "")))
            a, b = s_base.get(cb), s_new.get(cn)
            if a is not None and b is not None:
                p = _mann_whitney(a, b)
                rec["p_value"] = None if p is None else float(f"{p:.3g}")
            rec["verdict"] = _verdict(rec["time_ratio"], rec["p_value"], settings)
            rec["why"] = "" if rec["p_value"] is not None else "no samples: threshold only"
        out.append(rec)
    return pd.DataFrame(out)


def _gmean(values: pd.Series) -> float | None:
    vals = pd.to_numeric(values, errors="coerce").dropna()
    vals = vals[vals > 0]
    return round(float(np.exp(np.log(vals).mean())), 4) if len(vals) else None


def summarize(points: pd.DataFrame) -> pd.DataFrame:
    """Per op: geometric-mean ratios and verdict counts."""
    rows = []
    for op, g in points.groupby("op", sort=True):
        counts = g["verdict"].value_counts()
        rows.append({"op": op, "points": len(g),
                     "gmean_time_ratio": _gmean(g["time_ratio"]),
                     "gmean_busbw_ratio": _gmean(g["busbw_ratio"]),
                     **{v: int(counts.get(v, 0)) for v in ("better", "worse", "unchanged", "not comparable")}})
    return pd.DataFrame(rows)


def regressions(points: pd.DataFrame, fail_above_pct: float) -> pd.DataFrame:
    """Points judged worse whose time grew by more than fail_above_pct percent."""
    worse = points[points["verdict"] == "worse"]
    return worse[pd.to_numeric(worse["time_ratio"]) > 1.0 + fail_above_pct / 100.0]


def compare_document(base: Run, new: Run, points: pd.DataFrame, settings: CompareSettings):
    """The comparison as a Document (HTML and Markdown through commbench.analysis.report)."""
    from .report.document import Document

    doc = Document(f"commbench compare: {base.label} -> {new.label}")
    sec = doc.section("Summary")
    sec.text(f"Ratios are NEW/BASE (time < 1 and busbw > 1 are faster). A point is better or "
             f"worse when its median time changed by at least {settings.threshold_pct}% and, where "
             f"per-iteration samples exist, a two-sided Mann-Whitney U test on the slowest-rank "
             f"iteration times gives p < {settings.alpha}; otherwise unchanged. Geometric means "
             f"are over comparable points.")
    sec.table(summarize(points), "no points")
    sec = doc.section("Points")
    shown = [c for c in ("op", "backend", "variant", "dtype", "in_place", "world_size", "size",
                         "time_base_us", "time_new_us", "time_ratio", "busbw_ratio", "p_value",
                         "verdict", "why") if c in points.columns]
    for op, g in points.groupby("op", sort=True):
        sec.sub(str(op)).table(g[shown].drop(columns=["op"]).reset_index(drop=True))
    return doc
