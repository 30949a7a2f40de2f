"""The numbers behind each compared point's verdict, for every point at once (numpy, no loop over
points in Python): each side's time, the change, the noise, p-values and the mirror test, handed to
compare_rule.judge (docs/report.md, "How a verdict is reached").

A side's time is the mean of its runs' log median times, or their median with MEDIAN_OF_RUNS runs
or more (a run whose Case sat in a slow state moves the median of three runs by nothing). The
standard error of a change is the largest of: the spread of the changes of similar points
(noise.standard_errors), the spread of repeats pooled over the points, half the within-run spread,
and the point's own repeats (their variance around their side's mean, so a Case that sat in
another state in one run of several is as noisy as that run says)."""
from __future__ import annotations

import math
import warnings

import numpy as np

from . import noise
from .compare_rule import LOG_CAP, Evidence, format_floor, judge

MEDIAN_OF_RUNS = 3    # a side with this many runs or more takes the median of its runs' times
UNSTABLE_PCT = 10.0   # a point whose samples or repeats spread wider than this is marked unstable
PRIOR_DOF = 4.0      # degrees of freedom the pooled error weighs against a point's own repeats
# variance of the median of R normal values over that of their mean (R = 3, 4, 5; pi/2 beyond)
MEDIAN_EFFICIENCY = {3: 1.35, 4: 1.19, 5: 1.43}


def _matrix(sides, attr: str) -> np.ndarray:
    return np.array([getattr(p, attr) for p in sides], dtype=float)


def _center(logs: np.ndarray) -> tuple[np.ndarray, float]:
    """Per point the side's centre of its runs' log times, and the variance factor of that centre
    against a single run's (1/R for a mean, about (pi/2)/R for a median)."""
    r = logs.shape[1]
    if r >= MEDIAN_OF_RUNS:
        return np.median(logs, axis=1), MEDIAN_EFFICIENCY.get(r, math.pi / 2) / r
    return logs.mean(axis=1), 1.0 / r


def _own_variance(lb: np.ndarray, ln: np.ndarray) -> np.ndarray:
    """The variance of one run's log time from the point's own repeats (both sides pooled), NaN
    where neither side has two runs."""
    ss, dof = np.zeros(len(lb)), 0
    for logs in (lb, ln):
        if logs.shape[1] >= 2:
            ss = ss + ((logs - logs.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
            dof += logs.shape[1] - 1
    return ss / dof if dof else np.full(len(lb), np.nan)


def _moderated(pooled_se: np.ndarray, own_var: np.ndarray, dof: int) -> np.ndarray:
    """The standard error from the pooled estimate (PRIOR_DOF degrees of freedom' worth) and the
    point's own repeats (``dof``) together, as an empirical-Bayes moderated variance: a point whose
    repeats agree keeps about the pooled error, one whose repeats disagree (a Case in another state
    in one run) takes its own, larger one. Never below the pooled error."""
    if dof <= 0:
        return pooled_se
    own = np.nan_to_num(own_var, nan=0.0)
    mixed = (PRIOR_DOF * pooled_se ** 2 + dof * own) / (PRIOR_DOF + dof)
    return np.maximum(pooled_se, np.sqrt(mixed))


def _pooled_residuals(lb: np.ndarray, ln: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Repeats' run times around their side's mean, in units of the point's within-run spread,
    corrected for the degrees of freedom (noise.standard_errors pools them over every point)."""
    out = []
    for logs in (lb, ln):
        r = logs.shape[1]
        if r >= 2:
            res = (logs - logs.mean(axis=1, keepdims=True)) / s[:, None] * math.sqrt(r / (r - 1))
            out.append(res.ravel())
    return np.concatenate(out) if out else np.array([])


def has_noise_info(pb, pn) -> bool:
    """Samples (3 or more) on either side, or repeats: something says how noisy the point is."""
    counts = [c for c in pb.counts + pn.counts if c == c]
    return any(c >= 3 for c in counts) or len(pb.times_us) > 1 or len(pn.times_us) > 1


def _gmean_rows(matrix: np.ndarray) -> np.ndarray:
    """Per row the geometric mean of its positive finite values (NaN when none)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # a row with no value: NaN, said without a warning
        logs = np.log(np.where((matrix > 0) & np.isfinite(matrix), matrix, np.nan))
        return np.exp(np.nanmean(logs, axis=1)) if matrix.size else np.full(len(matrix), np.nan)


def _pct_of_logs(logs: np.ndarray) -> np.ndarray:
    """Percentages of log-ratios, rounded to 0.01; infinite past LOG_CAP (compare_rule._pct's rule)."""
    with np.errstate(over="ignore"):
        return np.where(logs < LOG_CAP, np.round(100.0 * np.expm1(np.minimum(logs, LOG_CAP)), 2), np.inf)


def _ratio_columns(d: np.ndarray, pbs, pns) -> dict:
    ratio = np.exp(np.minimum(d, LOG_CAP))
    bb, bn = _gmean_rows(_matrix(pbs, "busbw")), _gmean_rows(_matrix(pns, "busbw"))
    with np.errstate(all="ignore"):
        busbw = np.where((bb > 0) & (bn > 0), np.round(bn / bb, 4), np.nan)
    change = _pct_of_logs(d)
    return {"time_ratio": np.round(ratio, 4), "busbw_ratio": busbw, "change_pct": change}


def threshold_only(pbs: list, pns: list, settings) -> dict:
    """Points with neither samples nor repeats on either side: the noise is unknown. Columns of
    the points' rows, in their order."""
    d = np.log(_gmean_rows(_matrix(pns, "times_us")) / _gmean_rows(_matrix(pbs, "times_us")))
    out = _ratio_columns(d, pbs, pns)
    judged = [judge(Evidence(d=float(x), floor_log=math.nan, p_adjusted=math.nan, known_noise=False),
                    settings.threshold_pct, settings.alpha) for x in d]
    out["verdict"], out["why"] = [j[0] for j in judged], [j[1] for j in judged]
    return out


def _sig3(values) -> np.ndarray:
    return np.array([float(f"{v:.3g}") for v in values], dtype=float)


def decide(pbs: list, pns: list, settings, curve_of, busy_single: str = "") -> dict:
    """Ratios, noise, p-values and verdicts of the comparable points, as columns of their rows in
    their order (all at once: the noise estimate, the correction and the mirror test look at every
    point)."""
    if not pbs:
        return {}
    lb, ln = np.log(_matrix(pbs, "times_us")), np.log(_matrix(pns, "times_us"))
    spreads_all = np.hstack([_matrix(pbs, "spreads"), _matrix(pns, "spreads")])
    with np.errstate(all="ignore"):
        s = np.nanmedian(np.where(np.isfinite(spreads_all), spreads_all, np.nan), axis=1)
    known = s[np.isfinite(s)]
    s = np.maximum(noise.SPREAD_FLOOR, np.where(np.isfinite(s), s, float(np.median(known)) if len(known) else 1.0))
    cb, fb = _center(lb)
    cn, fn = _center(ln)
    d = cn - cb
    k = np.full(len(d), math.sqrt(fb + fn))
    within_var = np.zeros(len(d))
    for side, logs in ((pbs, lb), (pns, ln)):
        w = np.nan_to_num(_matrix(side, "spreads"), nan=0.0)
        n_samples = np.maximum(_matrix(side, "counts"), 1.0)
        within_var += (noise.MEDIAN_VARIANCE * w * w / n_samples).mean(axis=1) / logs.shape[1]
    both = lb.shape[1] >= 2 and ln.shape[1] >= 2
    errors, _ = noise.standard_errors(d, s, k, _pooled_residuals(lb, ln, s), within_var, curve_of, both)
    se = _moderated(np.asarray(errors), _own_variance(lb, ln) * k * k, lb.shape[1] + ln.shape[1] - 2)
    z = np.where(se > 0, d / np.where(se > 0, se, 1.0), 0.0)
    p_raw = [noise.two_sided_p(x) if e > 0 else 1.0 for x, e in zip(z, se)]
    p_adj = noise.adjust(p_raw, settings.correction)
    z_detect = noise.detect_z(settings.alpha, len(pbs), settings.correction)
    single = lb.shape[1] == 1 or ln.shape[1] == 1
    mirrored = noise.mirror_selected(z)
    between = np.maximum(_between_pct(lb), _between_pct(ln))
    floor_log = z_detect * se
    noise_pct = _pct_of_logs(floor_log)
    unstable = (100.0 * s > UNSTABLE_PCT) | (between > UNSTABLE_PCT)
    verdicts, whys, repeats = [], [], []
    for i in range(len(d)):
        ev = Evidence(d=float(d[i]), floor_log=float(floor_log[i]), p_adjusted=p_adj[i], mirrored=bool(mirrored[i]),
                      scale=float(k[i]), single=single, busy_single=busy_single)
        verdict, why, need = judge(ev, settings.threshold_pct, settings.alpha)
        if unstable[i]:
            note = f"unstable: spread {100.0 * s[i]:.0f}% within runs" + (
                f", {between[i]:.0f}% between repeats" if between[i] else "")
            why = f"{why}; {note}" if why else note
        verdicts.append(verdict)
        whys.append(why)
        repeats.append(need)
    return {**_ratio_columns(d, pbs, pns), "time_base_us": np.exp(cb), "time_new_us": np.exp(cn),
            "noise_pct": noise_pct, "noise_shown": [format_floor(x) for x in noise_pct],
            "p_value": _sig3(p_raw), "p_adjusted": _sig3(p_adj), "unstable": unstable,
            "verdict": verdicts, "why": whys, "repeats_to_tell": np.array(repeats, dtype=float)}


def _between_pct(logs: np.ndarray) -> np.ndarray:
    """Per point: 100 (max / min - 1) over a side's runs (0 for one run)."""
    if logs.shape[1] < 2:
        return np.zeros(len(logs))
    with np.errstate(over="ignore"):
        return 100.0 * np.expm1(logs.max(axis=1) - logs.min(axis=1))
