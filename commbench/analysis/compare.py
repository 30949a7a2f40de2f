"""Compare runs point by point: ratios NEW/BASE and verdicts that tell change from noise.

Each side is one run folder or several (repeats). A point is better or worse only when its time
changed by at least the threshold *and* the change stands out from the point's noise after a
correction for testing every point at once, and by more than the point's noise floor; a point
that cannot show that is `can't tell`, never `unchanged` (commbench.analysis.noise; docs/report.md)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from commbench.runfolder.reader import Run, iteration_times
from commbench.units import format_size

from . import noise, rehearsal

KEY = ["family", "op", "backend", "variant", "dtype", "size_bytes", "world_size"]
# Optional columns that also tell points apart when both runs have them.
# (register, offset_bytes, traffic: what the collectives measured; rank_time only reduces the same
# iterations differently, so an nccl-tests -a 1 import still pairs with commbench's max)
KEY_OPTIONAL = ["in_place", "register", "offset_bytes", "traffic"]
# Tell apart points that share the key within a run (a suite timing one op two ways, an
# imported nccl-tests run with and without -G); case_id only when these are not enough.
DISAMBIGUATE = ["timing"]
DEFAULT_THRESHOLD_PCT = 5.0
DEFAULT_ALPHA = 0.05
DEFAULT_CORRECTION = "holm"
UNSTABLE_PCT = 10.0   # a point whose samples or repeats spread wider than this is marked unstable
# A noise floor above a 10x change: no change a real regression plausibly makes could show, so
# even a small measured change says nothing (seen: floors of 3e22% on a flipping gloo op).
PLAUSIBLE_EFFECT_PCT = 900.0
MOST_REPEATS = 10   # a point that needs more repeats than this to tell is too noisy for repeats
CANT_TELL = "can't tell"
# Verdicts, each point exactly one. "worse" (beyond --fail-above), "not comparable" and "missing"
# fail `compare --fail-above`; "can't tell" does not (it is listed, with the repeats that would tell).
VERDICTS = ("better", "worse", "unchanged", CANT_TELL, "not comparable", "skipped", "new", "missing")
# The order in which a side reports a point that is not ok in some run.
_BAD_ORDER = ("failed", "timeout", "wrong", "missing", "skipped")


@dataclass(frozen=True)
class CompareSettings:
    """threshold_pct: smallest time change that counts (the minimum effect size); alpha: the
    significance level after the correction for many points (holm, bh or none)."""

    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    alpha: float = DEFAULT_ALPHA
    correction: str = DEFAULT_CORRECTION


def _as_side(side) -> list[Run]:
    return list(side) if isinstance(side, (list, tuple)) else [side]


def _keys(base: list[pd.DataFrame], new: list[pd.DataFrame]) -> list[str]:
    frames = base + new
    keys = [k for k in KEY if all(k in f.columns for f in frames)]
    keys += [k for k in KEY_OPTIONAL if all(k in f.columns for f in frames)]

    def ambiguous() -> bool:
        return any(f.duplicated(keys).any() for f in frames)

    for col in DISAMBIGUATE:
        if ambiguous() and all(col in f.columns for f in frames):
            keys.append(col)
    # A parameter sweep can give several rows per key: the stable case_id then separates them.
    if all("case_id" in f.columns for f in frames) and ambiguous():
        keys.append("case_id")
    return keys


def _samples_by_case(run: Run) -> dict[str, np.ndarray]:
    per_iter = iteration_times(run.samples)
    return {cid: g["time_us"].to_numpy(dtype=float) for cid, g in per_iter.groupby("case_id")}


@dataclass
class _SidePoint:
    """One point on one side: per run (in order) its status, time, busbw and samples."""

    statuses: list
    times_us: list
    busbw: list
    samples: list
    shared: list = None   # per run: ranks that shared the point's GPU (0: not said / not shared)
    bounds: list = None   # per run: the point's bound_gbps from its run.json links (NaN: none)

    @property
    def most_shared(self) -> int:
        return max(self.shared or [0])

    @property
    def status(self) -> str:
        bad = [s for s in self.statuses if s != "ok"]
        if not bad:
            return "ok"
        return min(bad, key=lambda s: _BAD_ORDER.index(s) if s in _BAD_ORDER else -1)


def _bound(row: dict, links) -> float:
    """The row's bound_gbps by analysis/bounds.py (NaN without links or a rule)."""
    from .bounds import row_bound

    if not links:
        return math.nan
    limit, _ = row_bound(row, links)
    return limit.gbps if limit else math.nan


def _side_points(runs: list[Run], keys: list[str]) -> dict[tuple, _SidePoint]:
    points: dict[tuple, _SidePoint] = {}
    for i, run in enumerate(runs):
        samples = _samples_by_case(run)
        links = (run.meta or {}).get("links")
        for row in run.results.to_dict("records"):
            key = tuple(_key_value(row[k]) for k in keys)
            pt = points.setdefault(key, _SidePoint(["missing"] * len(runs), [math.nan] * len(runs),
                                                   [math.nan] * len(runs), [None] * len(runs),
                                                   [0] * len(runs), [math.nan] * len(runs)))
            pt.bounds[i] = _bound(row, links)
            pt.shared[i] = rehearsal.ranks_per_gpu(row.get(rehearsal.COLUMN))
            pt.statuses[i] = str(row.get("status", "ok") or "ok")
            pt.times_us[i] = _num(row.get("time_us"))
            pt.busbw[i] = _num(row.get("busbw_gbps"))
            pt.samples[i] = samples.get(str(row.get("case_id", "")))
    return points


def _key_value(value):
    """NaN never equals itself: an empty key cell becomes None so both sides pair on it."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _num(value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


def _gmean_list(values) -> float:
    v = [x for x in values if x is not None and math.isfinite(x) and x > 0]
    return float(np.exp(np.mean(np.log(v)))) if v else math.nan


def _spread(pb: _SidePoint, pn: _SidePoint) -> float:
    """The point's within-run spread s_j (robust sd of log samples), median over every run."""
    w = [noise.log_spread(s) for s in pb.samples + pn.samples if s is not None]
    w = [x for x in w if not math.isnan(x)]
    return float(np.median(w)) if w else math.nan


def _between_pct(p: _SidePoint) -> float:
    t = [x for x in p.times_us if math.isfinite(x) and x > 0]
    return 100.0 * (max(t) / min(t) - 1.0) if len(t) >= 2 else 0.0


def compare_runs(base, new, settings: CompareSettings = CompareSettings()) -> pd.DataFrame:
    """One row per point present in either side (a Run or a list of Runs): times (geometric mean
    over a side's runs), ratios, noise, p-values, verdict and why."""
    base_runs, new_runs = _as_side(base), _as_side(new)
    keys = _keys([r.results for r in base_runs], [r.results for r in new_runs])
    pb_all, pn_all = _side_points(base_runs, keys), _side_points(new_runs, keys)
    order = list(pb_all) + [k for k in pn_all if k not in pb_all]
    recs, comparable = [], []
    for key in order:
        rec = {k: v for k, v in zip(keys, key) if k != "case_id"}
        rec["size"] = format_size(int(rec["size_bytes"])) if "size_bytes" in rec else ""
        rec.update(time_base_us=math.nan, time_new_us=math.nan, time_ratio=math.nan,
                   busbw_ratio=math.nan, change_pct=math.nan, noise_pct=math.nan, p_value=math.nan,
                   p_adjusted=math.nan, unstable=False, repeats_to_tell=math.nan,
                   verdict="not comparable", why="")
        pb, pn = pb_all.get(key), pn_all.get(key)
        recs.append(rec)
        if pb is None:
            rec.update(verdict="new", why="only in new")
            continue
        if pn is None:
            rec.update(verdict="missing", why="missing in new")
            continue
        rec["time_base_us"], rec["time_new_us"] = _gmean_list(pb.times_us), _gmean_list(pn.times_us)
        rec.update(_bound_columns(pb, pn))
        sb, sn = pb.status, pn.status
        if sb == sn == "skipped":
            rec.update(verdict="skipped", why="skipped in both")
        elif sb != "ok" or sn != "ok":
            rec["why"] = f"status base={sb} new={sn}"
        elif max(pb.most_shared, pn.most_shared) > 1:   # a rehearsal's times are not speed
            side = "base" if pb.most_shared > 1 else "new"
            rec["why"] = f"{side}: " + rehearsal.shared_reason(max(pb.most_shared, pn.most_shared))
        elif any(not (t > 0) for t in pb.times_us + pn.times_us):
            rec["why"] = "no positive time"
        else:
            comparable.append((rec, pb, pn))
    _decide(comparable, settings)
    return pd.DataFrame(recs)


def _bound_columns(pb: _SidePoint, pn: _SidePoint) -> dict:
    """bound_gbps (NEW's, else BASE's) and each side's busbw as a percentage of its own bound."""
    out = {}
    for name, side in (("base", pb), ("new", pn)):
        bound = _gmean_list(side.bounds or [])
        busbw = _gmean_list(side.busbw)
        out[f"pct_of_bound_{name}"] = round(100.0 * busbw / bound, 1) if bound > 0 and busbw > 0 else math.nan
        if bound > 0:
            out["bound_gbps"] = round(bound, 2)
    out.setdefault("bound_gbps", math.nan)
    return out


def _has_noise_info(pb: _SidePoint, pn: _SidePoint) -> bool:
    return (any(x is not None and len(x) >= 3 for x in pb.samples + pn.samples)
            or len(pb.times_us) > 1 or len(pn.times_us) > 1)


def _threshold_only(comparable: list, settings: CompareSettings) -> None:
    """Points with neither samples nor repeats on either side (an imported nccl-tests table, a
    reference run kept without samples): nothing says how noisy they are, so a change of the
    threshold or more is can't tell (it may be noise), a smaller one unchanged, and the row says so."""
    for rec, pb, pn in comparable:
        ratio = _gmean_list(pn.times_us) / _gmean_list(pb.times_us)
        rec["time_ratio"] = round(ratio, 4)
        bb, bn = _gmean_list(pb.busbw), _gmean_list(pn.busbw)
        if bb > 0 and bn > 0:
            rec["busbw_ratio"] = round(bn / bb, 4)
        rec["change_pct"] = round(100.0 * (ratio - 1.0), 2)
        if abs(rec["change_pct"]) >= settings.threshold_pct:
            rec["verdict"] = CANT_TELL
            rec["why"] = (f"changed {rec['change_pct']:+.4g}% but the noise is unknown: no samples or "
                          "repeats on either side")
        else:
            rec["verdict"] = "unchanged"
            rec["why"] = "no samples or repeats: threshold only"


def _decide(comparable: list, settings: CompareSettings) -> None:
    """Fill ratios, noise, p-values and verdicts of the comparable points (all at once: the noise
    estimate and the correction look at every point)."""
    _threshold_only([c for c in comparable if not _has_noise_info(c[1], c[2])], settings)
    comparable = [c for c in comparable if _has_noise_info(c[1], c[2])]
    if not comparable:
        return
    spreads = [_spread(pb, pn) for _, pb, pn in comparable]
    known = [s for s in spreads if not math.isnan(s)]
    fallback = float(np.median(known)) if known else 1.0   # no samples anywhere: c carries the scale
    spreads = [max(noise.SPREAD_FLOOR, fallback if math.isnan(s) else s) for s in spreads]
    residuals, changes, scale, within_var = [], [], [], []
    for (rec, pb, pn), s in zip(comparable, spreads):
        lb, ln = np.log(pb.times_us), np.log(pn.times_us)
        changes.append(float(ln.mean() - lb.mean()))
        scale.append(math.sqrt(1 / len(lb) + 1 / len(ln)))
        for logs in (lb, ln):
            if len(logs) >= 2:
                dof = math.sqrt(len(logs) / (len(logs) - 1))
                residuals += [float(x - logs.mean()) / s * dof for x in logs]
        within_var.append(sum(np.mean([noise.median_log_variance(x) if x is not None else 0.0
                                       for x in side.samples]) / len(side.times_us) for side in (pb, pn)))
    curves = [tuple(v for k, v in rec.items() if k not in ("size_bytes", "size")) for rec, _, _ in comparable]
    errors, _source = noise.standard_errors(changes, spreads, scale, residuals, within_var, curves)
    p_raw = []
    for rec, d, se in zip((c[0] for c in comparable), changes, errors):
        rec["_d"], rec["_se"] = d, se
        p_raw.append(noise.two_sided_p(d / se) if se > 0 else 1.0)
    p_adj = noise.adjust(p_raw, settings.correction)
    z_detect = noise.detect_z(settings.alpha, len(comparable), settings.correction)
    for (rec, pb, pn), s, p, pa in zip(comparable, spreads, p_raw, p_adj):
        d, se = rec.pop("_d"), rec.pop("_se")
        ratio = math.exp(d)
        rec["time_ratio"] = round(ratio, 4)
        bb, bn = _gmean_list(pb.busbw), _gmean_list(pn.busbw)
        if bb > 0 and bn > 0:
            rec["busbw_ratio"] = round(bn / bb, 4)
        rec["change_pct"] = round(100.0 * (ratio - 1.0), 2)
        rec["noise_pct"] = round(noise.detectable_pct(se, z_detect), 2)
        rec["p_value"], rec["p_adjusted"] = float(f"{p:.3g}"), float(f"{pa:.3g}")
        between = max(_between_pct(pb), _between_pct(pn))
        rec["unstable"] = bool(100.0 * s > UNSTABLE_PCT or between > UNSTABLE_PCT)
        _verdict(rec, d, z_detect * se, pa, settings, math.sqrt(1 / len(pb.times_us) + 1 / len(pn.times_us)))
        if rec["unstable"]:
            why = f"unstable: spread {100.0 * s:.0f}% within runs" + (
                f", {between:.0f}% between repeats" if between else "")
            rec["why"] = f"{rec['why']}; {why}" if rec["why"] else why


def _verdict(rec: dict, d: float, floor_log: float, p_adjusted: float, settings: CompareSettings,
             scale: float) -> None:
    """better/worse only for a change of at least the threshold, significant, and at least the
    point's noise floor (compared as log ratios: 2x faster is as large as 2x slower). A change of
    the threshold the point cannot show, or a floor no plausible change clears, is can't tell."""
    big = abs(rec["change_pct"]) >= settings.threshold_pct
    if big and p_adjusted < settings.alpha and abs(d) >= floor_log:
        rec["verdict"] = "worse" if d > 0 else "better"
        return
    plausible_log = math.log1p(PLAUSIBLE_EFFECT_PCT / 100.0)
    if not big and floor_log <= plausible_log:
        rec["verdict"] = "unchanged"
        return
    rec["verdict"] = CANT_TELL
    if big:
        rec["why"] = f"changed {rec['change_pct']:+.4g}% within its noise floor of {rec['noise_pct']:.4g}%"
        target = abs(d)
    else:
        rec["why"] = (f"noise floor {rec['noise_pct']:.4g}%: not even a {PLAUSIBLE_EFFECT_PCT / 100 + 1:g}x "
                      f"change would show")
        target = plausible_log
    # The floor falls as sqrt(1/R_base + 1/R_new): the R on both sides that brings it to target.
    need = max(2, math.ceil(2.0 / (target * scale / floor_log) ** 2)) if target > 0 else math.inf
    rec["repeats_to_tell"] = need if need <= MOST_REPEATS else math.inf


def regressions(points: pd.DataFrame, fail_above_pct: float) -> pd.DataFrame:
    """Points judged worse whose time grew by more than fail_above_pct percent."""
    worse = points[points["verdict"] == "worse"]
    return worse[pd.to_numeric(worse["time_ratio"]) > 1.0 + fail_above_pct / 100.0]


def failing_points(points: pd.DataFrame, fail_above_pct: float) -> pd.DataFrame:
    """What fails `compare --fail-above`: points worse beyond their noise by more than the
    percentage, and every point of BASE that could not be compared (missing in NEW, not ok on
    either side, no time). Points only in NEW, skipped on both sides or can't tell do not fail."""
    if points.empty:
        return points
    worse = regressions(points, fail_above_pct)
    lost = points[points["verdict"].isin(["not comparable", "missing"])]
    return pd.concat([worse, lost]).sort_index()
