"""The statistics behind `compare`'s verdicts (docs/report.md): how noisy a point is, how sure a
change is, and a correction for testing many points at once. numpy and the standard library
only, so the analysis commands need nothing heavier.

Per point j each run contributes its stored median time; a side's time is the geometric mean
of its runs' medians and the change is d_j = log(new) - log(base). A run's median moves from run
to run by more than its own samples suggest (process placement, clocks, other work on the
machine), so the standard error of d_j is the largest of:

- the spread of the changes of the points most like it on other curves: the median absolute
  deviation of d_i - median(d) over the quarter of all points, outside j's own curve (same op,
  backend, variant, ... at other sizes), whose within-run spread s_i is closest to s_j (an
  "empirical null": most points of a comparison do not change and the median absolute deviation
  ignores the few that do; leaving the curve out keeps a changed op from hiding its own change,
  and a change shared by every point, a slower machine, is still judged but is not noise);
- its repeats: run medians around their side's mean, in units of s_j, pooled over all points,
  times s_j sqrt(1/R_base + 1/R_new);
- C_MIN s_j sqrt(1/R_base + 1/R_new) and the within-run error of the medians.

Run-to-run shifts on shared machines have heavy tails (a placement or a neighbour moves one point
far more often than a normal law allows), so p comes from a Student t law with TAIL_DOF degrees
of freedom fitted to the same median absolute deviation, and Holm's (or Benjamini-Hochberg's)
correction over all points gives the adjusted p that decides."""
from __future__ import annotations

import math

import numpy as np

MAD_TO_SIGMA = 1.4826          # median absolute deviation -> standard deviation of a normal
MEDIAN_VARIANCE = math.pi / 2  # variance of a sample median = (pi/2) sigma^2 / n (normal samples)
SPREAD_FLOOR = 0.002           # 0.2%: a point never counts as quieter than this
C_MIN = 0.5                    # run-to-run noise is at least half the within-run spread
C_FEW_POINTS = 2.0             # too few points to learn the noise from the comparison: assume 2x
MIN_POINTS_FOR_NULL = 8        # points needed before the comparison's own spread is trusted
NEIGHBOUR_SHARE = 0.25         # share of all points whose changes set a point's noise
DETECT_POWER = 0.99            # noise_pct: the change detected with this probability
TAIL_DOF = 6                   # Student t degrees of freedom of run-to-run shifts (heavy tails)
CORRECTIONS = ("holm", "bh", "none")
MIRROR_Q = 0.2                 # level of the mirror test (a false discovery rate: mirror_selected)
FIXED_POINT_STEPS = 3          # _neighbour_scale: steps to place the median without a curve
BLOCKS = 64                    # neighbour windows per width of the window (see _neighbour_scale)


def log_spread(samples: np.ndarray) -> float:
    """Robust standard deviation of log(samples) (NaN with fewer than 3 positive samples)."""
    x = np.asarray(samples, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    if len(x) < 3:
        return math.nan
    lx = np.log(x)
    return float(MAD_TO_SIGMA * np.median(np.abs(lx - np.median(lx))))


def robust_scale(values, center: float | None = None) -> float:
    """MAD-based standard deviation of values (around their median, or around ``center``)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return math.nan
    mid = float(np.median(v)) if center is None else center
    return float(MAD_TO_SIGMA * np.median(np.abs(v - mid)))


def _t_within(t: float, dof: int) -> float:
    """P(|T| < t) for a Student t law with an even number of degrees of freedom (closed form)."""
    theta = math.atan(abs(t) / math.sqrt(dof))
    cos2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    for k in range(1, dof // 2):
        term *= cos2 * (2 * k - 1) / (2 * k)
        total += term
    return min(1.0, math.sin(theta) * total)


# |T| of a t law whose median absolute deviation, times MAD_TO_SIGMA, is 1: a z measured in
# MAD-sigma units is this many times as large in the t law's own units.
def _t_mad(dof: int) -> float:
    lo, hi = 0.0, 10.0
    for _ in range(80):   # the median of |T|: P(|T| < m) = 1/2
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_within(mid, dof) < 0.5 else (lo, mid)
    return MAD_TO_SIGMA * lo


_T_SCALE = _t_mad(TAIL_DOF)


def two_sided_p(z: float) -> float:
    """P(|shift| >= |z| standard errors) under the heavy-tailed law of run-to-run shifts."""
    return max(0.0, 1.0 - _t_within(abs(z) * _T_SCALE, TAIL_DOF))


def _z_for_p(p: float) -> float:
    """|z| whose two-sided p is ``p`` (inverse of two_sided_p)."""
    lo, hi = 0.0, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if two_sided_p(mid) > p else (lo, mid)
    return hi


def adjust(p_values: list[float], method: str) -> list[float]:
    """p-values adjusted for testing them all: Holm (family-wise), Benjamini-Hochberg (false
    discovery rate) or none. NaN entries stay NaN and do not count as tests."""
    if method not in CORRECTIONS:
        raise ValueError(f"unknown correction {method!r} (known: {', '.join(CORRECTIONS)})")
    idx = [i for i, p in enumerate(p_values) if p is not None and math.isfinite(p)]
    out = [math.nan] * len(p_values)
    m = len(idx)
    if m == 0:
        return out
    order = sorted(idx, key=lambda i: p_values[i])
    if method == "none":
        for i in idx:
            out[i] = p_values[i]
    elif method == "holm":
        running = 0.0
        for k, i in enumerate(order):
            running = max(running, min(1.0, (m - k) * p_values[i]))
            out[i] = running
    else:  # bh
        running = 1.0
        for k in range(m - 1, -1, -1):
            i = order[k]
            running = min(running, min(1.0, m * p_values[i] / (k + 1)))
            out[i] = running
    return out


def critical_z(alpha: float, tests: int, method: str) -> float:
    """|z| a single point needs to pass the strictest step of the correction."""
    per_test = alpha / max(1, tests) if method in ("holm", "bh") else alpha
    return _z_for_p(per_test)


def detect_z(alpha: float, tests: int, method: str) -> float:
    """Standard errors a change needs to be detected with probability DETECT_POWER: the critical
    |z| plus the shift's own (1 - DETECT_POWER) quantile."""
    return critical_z(alpha, tests, method) + _z_for_p(2.0 * (1.0 - DETECT_POWER))


def standard_errors(changes, spreads, scale, residuals, within_var, curves,
                    both_repeated: bool = False) -> tuple[list[float], str]:
    """The standard error of each point's change d_j (log units), and where it came from.

    With repeats on both sides (``both_repeated``) each point's runs show its run-to-run noise, so
    the spread of other points' changes is not used: when a change moves most points by different
    amounts (a slower machine, a pinned core), that spread is the change, not noise.

    ``spreads``: s_j; ``scale``: sqrt(1/R_base + 1/R_new) per point; ``curves``: a hashable per
    point naming its curve (the points of one op across sizes); ``residuals``: repeats' run
    medians around their side's mean over s_j (already corrected for the degrees of freedom);
    ``within_var``: the within-run variance of d_j from the samples."""
    d = np.asarray(changes, dtype=float)
    s = np.asarray(spreads, dtype=float)
    k = np.asarray(scale, dtype=float)
    n = len(d)
    floor = np.maximum(C_MIN * s * k, np.sqrt(np.asarray(within_var, dtype=float)))
    c_rep = robust_scale(residuals, center=0.0) if len(residuals) >= 4 else math.nan
    rep = c_rep * s * k if not math.isnan(c_rep) else np.zeros(n)
    if n >= MIN_POINTS_FOR_NULL and not (both_repeated and not math.isnan(c_rep)):
        local, source = _neighbour_scale(d, s, k, list(curves)), "spread of the changes of similar points"
    elif not math.isnan(c_rep):
        local, source = np.zeros(n), "repeats"
    else:
        local = C_FEW_POINTS * s * k
        source = (f"assumed {C_FEW_POINTS:g}x the within-run spread "
                  f"(fewer than {MIN_POINTS_FOR_NULL} points, no repeats)")
    if not math.isnan(c_rep) and n >= MIN_POINTS_FOR_NULL and not both_repeated:
        source += " and repeats"
    return [float(x) for x in np.maximum.reduce([local, rep, floor])], source


def _neighbour_scale(d: np.ndarray, s: np.ndarray, k: np.ndarray, curves: list) -> np.ndarray:
    """Per point: the MAD-sigma of (d_i - median d) over about NEIGHBOUR_SHARE of the points, on
    other curves, nearest in within-run spread (rescaled to this point's number of runs).

    The points are sorted by log s once; the points of one block of BLOCKS consecutive ranks share
    one window of ranks centred on the block, holding ``width`` points plus those of the curves
    found in the block; a point's own curve is then left out of the window's median by rank
    arithmetic (with x of the removed values below it, the rest's median is the window's value of
    rank (rest - 1) / 2 + x; x is found by a few fixed-point steps).
    O(n log n): sorting, one sort per block, and counts per curve."""
    n = len(d)
    width = max(MIN_POINTS_FOR_NULL, math.ceil(n * NEIGHBOUR_SHARE))
    dev = np.abs(d - np.median(d)) / k          # per unit of sqrt(1/R_base + 1/R_new)
    order = np.argsort(np.log(s), kind="stable")
    _, curve_of = np.unique(np.array([hash(c) for c in curves]), return_inverse=True)
    sizes = np.bincount(curve_of)
    out = np.empty(n)
    step = max(1, width // BLOCKS)
    for lo in range(0, n, step):
        block = order[lo:lo + step]
        own = sizes[curve_of[block]].max()
        span = min(n, width + own)
        start = min(max(0, lo + len(block) // 2 - span // 2), n - span)
        window = order[start:start + span]
        vals = np.sort(dev[window])
        inside = np.bincount(curve_of[window], minlength=len(sizes))
        inn = inside[curve_of[block]]
        left = span - inn
        # the median of the window without the point's own curve: rank (left - 1) / 2 among the
        # rest, so rank (left - 1) / 2 + x in the window, x = own values below it; x is found by
        # a few fixed-point steps from the window's median
        target = np.full(len(block), (span - 1) / 2.0)
        thr = np.full(len(sizes), np.inf)
        for _ in range(FIXED_POINT_STEPS):
            thr[curve_of[block]] = vals[np.clip(np.round(target).astype(int), 0, span - 1)]
            below = np.bincount(curve_of[window], weights=dev[window] < thr[curve_of[window]],
                                minlength=len(sizes))
            target = (left - 1) / 2.0 + below[curve_of[block]]
        med_rank = np.where(left < MIN_POINTS_FOR_NULL, (span - 1) / 2.0, target)
        lo_r = np.clip(np.floor(med_rank).astype(int), 0, span - 1)
        hi_r = np.clip(np.ceil(med_rank).astype(int), 0, span - 1)
        out[block] = MAD_TO_SIGMA * 0.5 * (vals[lo_r] + vals[hi_r]) * k[block]
    return out


def mirror_selected(z: np.ndarray, q: float = MIRROR_Q) -> np.ndarray:
    """Which points stand out of the mirror test: with no change at all the two sides are
    exchangeable, so as many points move by a given number of standard errors one way as the other
    (whatever the law of the noise, heavy tails and whole-run states included). A point with
    z = d / se > 0 is selected when it lies at or above the smallest t where
    (1 + #{z <= -t}) / #{z >= t} <= q (the knockoff+ filter: the share of false changes among the
    selected stays under q; with nothing changed, the chance that any point is selected too);
    likewise for z < 0. O(n log n)."""
    z = np.asarray(z, dtype=float)
    out = np.zeros(len(z), dtype=bool)
    for sign in (1.0, -1.0):
        w = sign * z
        pos = np.sort(w[w > 0])
        if len(pos) == 0:
            continue
        neg = np.sort(-w[w < 0])                        # magnitudes of the other way
        same = len(pos) - np.arange(len(pos))           # #{w >= t} for t = pos[i]
        other = len(neg) - np.searchsorted(neg, pos, side="left")   # #{-w >= t}
        ok = np.flatnonzero((1.0 + other) / same <= q)
        if len(ok):
            out |= w >= pos[ok[0]]
    return out
