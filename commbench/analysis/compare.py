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

from . import compare_stats, noise, rehearsal
from .compare_stats import MEDIAN_OF_RUNS, UNSTABLE_PCT  # noqa: F401 (re-exported)
from .compare_rule import CANT_TELL, MOST_REPEATS, PLAUSIBLE_EFFECT_PCT, Evidence, judge  # noqa: F401 (re-exported)

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
# Verdicts, each point exactly one (compare_rule.judge decides better/worse/unchanged/can't tell).
# "worse" (beyond --fail-above), "not comparable" and "missing" fail `compare --fail-above`;
# "can't tell" makes it inconclusive when the point moved up by more than the gate (exit 3).
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


def _case_spreads(run: Run) -> dict[str, tuple[float, int]]:
    """Per case_id: (robust sd of the log per-iteration times, or NaN below 3 positive samples;
    number of samples), vectorised over every Case of the run."""
    per_iter = iteration_times(run.samples)
    if per_iter.empty:
        return {}
    t = pd.to_numeric(per_iter["time_us"], errors="coerce")
    frame = pd.DataFrame({"case_id": per_iter["case_id"].astype(str), "count": np.isfinite(t)})
    good = np.isfinite(t) & (t > 0)
    frame["log"] = np.log(t.where(good))
    g = frame.groupby("case_id", sort=False)
    frame["dev"] = (frame["log"] - g["log"].transform("median")).abs()
    stats = frame.groupby("case_id", sort=False).agg(n=("count", "sum"), pos=("log", "count"),
                                                      mad=("dev", "median"))
    spread = np.where(stats["pos"] >= 3, noise.MAD_TO_SIGMA * stats["mad"], np.nan)
    return dict(zip(stats.index, zip(spread.tolist(), stats["n"].astype(int).tolist())))


@dataclass(slots=True)   # one per point and side: 100,000s at fleet size
class _SidePoint:
    """One point on one side: per run (in order) its status, time, busbw, within-run spread
    (robust sd of log samples, NaN without 3 samples) and number of samples."""

    statuses: list
    times_us: list
    busbw: list
    spreads: list
    counts: list
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


def _bounds(frame: pd.DataFrame, links) -> list[float]:
    """Each row's bound_gbps by analysis/bounds.py (NaN without links or a rule)."""
    if not links or frame.empty:
        return [math.nan] * len(frame)
    from .bounds import HOST_BACKENDS, row_bound

    out = [math.nan] * len(frame)
    host = frame["backend"].astype(str).isin(HOST_BACKENDS).to_numpy() if "backend" in frame else \
        np.zeros(len(frame), dtype=bool)
    if host.all():   # host memory has no GPU link bound (bounds.row_bound): no row to look at
        return out
    for i, row in zip(np.flatnonzero(~host), frame[~host].to_dict("records")):
        limit, _ = row_bound(row, links)
        out[i] = limit.gbps if limit else math.nan
    return out


def _numbers(frame: pd.DataFrame, name: str) -> list[float]:
    """A numeric column as finite floats, NaN for anything else (_num for a whole column)."""
    if name not in frame.columns:
        return [math.nan] * len(frame)
    v = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)
    return np.where(np.isfinite(v), v, np.nan).tolist()


def _column(frame: pd.DataFrame, name: str, default) -> list:
    return frame[name].tolist() if name in frame.columns else [default] * len(frame)


def _side_points(runs: list[Run], keys: list[str]) -> dict[tuple, _SidePoint]:
    points: dict[tuple, _SidePoint] = {}
    nruns = len(runs)
    for i, run in enumerate(runs):
        spreads = _case_spreads(run)
        frame = run.results
        key_cols = [_key_column(frame[k]) for k in keys]
        statuses = [str(v or "ok") if v == v else "ok" for v in _column(frame, "status", "ok")]
        times, busbw = _numbers(frame, "time_us"), _numbers(frame, "busbw_gbps")
        shared = [int(x) if x == x else 0 for x in _numbers(frame, rehearsal.COLUMN)]   # ranks_per_gpu
        bounds = _bounds(frame, (run.meta or {}).get("links"))
        cases = frame["case_id"].astype(str).tolist() if "case_id" in frame.columns else [""] * len(frame)
        per_case = [spreads.get(c, (math.nan, 0)) for c in cases]
        rows = zip(zip(*key_cols), statuses, times, busbw, per_case, shared, bounds)
        for key, status, time_us, bw, (spread, count), sh, bound in rows:
            pt = points.get(key)
            if pt is None:
                if nruns == 1:   # the common case at fleet size: build the point at once
                    points[key] = _SidePoint([status], [time_us], [bw], [spread], [count], [sh], [bound])
                    continue
                pt = points[key] = _SidePoint(["missing"] * nruns, [math.nan] * nruns, [math.nan] * nruns,
                                              [math.nan] * nruns, [0] * nruns, [0] * nruns, [math.nan] * nruns)
            pt.statuses[i], pt.times_us[i], pt.busbw[i] = status, time_us, bw
            pt.spreads[i], pt.counts[i], pt.shared[i], pt.bounds[i] = spread, count, sh, bound
    return points


def _key_column(col: pd.Series) -> list:
    """A key column as values, empty cells as None (NaN never equals itself; None pairs with None)."""
    return col.astype(object).where(col.notna(), None).tolist()


def _gmean_list(values) -> float:
    if len(values) == 1:   # one run a side: the common case at fleet size
        x = values[0]
        return x if x is not None and 0 < x < math.inf else math.nan
    v = [x for x in values if x is not None and 0 < x < math.inf]   # NaN fails both comparisons
    return math.exp(sum(map(math.log, v)) / len(v)) if v else math.nan


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
                   noise_shown="", p_adjusted=math.nan, unstable=False, repeats_to_tell=math.nan,
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
            comparable.append((len(recs) - 1, pb, pn))
    points = pd.DataFrame(recs)
    _decide(points, comparable, settings, keys, _busy_single(base_runs, new_runs))
    return points


def _busy_single(base_runs: list[Run], new_runs: list[Run]) -> str:
    """"BASE" or "NEW" when that side is one run whose run.json says the machine was busy."""
    from commbench.sysinfo.load import busy_reasons

    for name, runs in (("BASE", base_runs), ("NEW", new_runs)):
        if len(runs) == 1 and busy_reasons((runs[0].meta or {}).get("machine_load")):
            return name
    return ""


def _decide(points: pd.DataFrame, comparable: list, settings: CompareSettings, keys: list[str],
            busy_single: str = "") -> None:
    """Verdicts into ``points``: points without any noise information by the threshold alone, the
    rest together."""
    known = [c for c in comparable if compare_stats.has_noise_info(c[1], c[2])]
    unknown = [c for c in comparable if not compare_stats.has_noise_info(c[1], c[2])]
    if unknown:
        _fill(points, [c[0] for c in unknown],
              compare_stats.threshold_only([c[1] for c in unknown], [c[2] for c in unknown], settings))
    if known:
        curve_cols = [k for k in keys if k not in ("size_bytes", "case_id")]
        rows = points.iloc[[c[0] for c in known]]
        curves = list(zip(*(rows[k].tolist() for k in curve_cols))) if curve_cols else [()] * len(known)
        _fill(points, [c[0] for c in known],
              compare_stats.decide([c[1] for c in known], [c[2] for c in known], settings, curves, busy_single))


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


def _fill(points: pd.DataFrame, positions: list[int], columns: dict) -> None:
    """Write each column's values into the rows at ``positions``."""
    for name, values in columns.items():
        current = points[name].to_numpy(copy=True)
        values = np.asarray(values)
        if current.dtype.kind != values.dtype.kind:
            current = current.astype(object)
        current[positions] = values
        points[name] = current
        if current.dtype == object and values.dtype.kind in "fb":
            points[name] = points[name].infer_objects()


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
