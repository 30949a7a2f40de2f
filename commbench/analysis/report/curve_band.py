"""Many curves in one panel (a fleet's nodes, a long sweep): the outliers as labelled curves and a
band for the rest, never hundreds of lines and legend entries.

A panel's curves are a table: one row per curve, one column per message size (the curve's value
there, its median over rows). Per size, the **reference** is the median over the curves. A curve's
**score** is the median over its sizes of log(value / reference): how far, typically, it sits from
the others (a curve 30 % slower at every size scores log 1.3). Its **robust z** is the score's
distance from the median score in units of 1.4826 x MAD (the median absolute deviation, scaled
to a standard deviation for normal data). A curve with |z| >= OUTLIER_Z whose median ratio is at
least MIN_EFFECT away from 1 (in a tight fleet a curve 2 % off can reach the z, and is not worth a
name) is an outlier: drawn and named (at most MAX_LABELLED per panel, by |z|; the report's outlier
table lists them all); the others form the band: their median, p5-p95 and min-max, per size.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

MAX_CURVES = 12       # more curves than this in one panel: outliers + band
OUTLIER_Z = 3.5       # robust z at or above which a curve is an outlier (as accept's localize)
MIN_EFFECT = 0.05     # ...and at least 5 % from the others (a tight fleet's 2 % is not worth a name)
MAX_LABELLED = 8      # outliers drawn per panel; the others are listed, not drawn
MIN_CURVES_AT_SIZE = 3   # a size with fewer curves has no reference (no majority to call normal)
MAD_TO_SIGMA = 1.4826
MEAN_AD_TO_SIGMA = 1.2533   # when more than half the scores are equal (MAD 0): mean absolute deviation


def curve_scores(table: pd.DataFrame) -> pd.DataFrame:
    """Per curve (``table``'s index): ``median_ratio`` (exp of its score: 1.3 = 30 % above the
    per-size median) and ``robust_z``, sorted by |z| descending. NaN where the curve shares no
    size with enough others, or where every score is the same (nothing stands out)."""
    values = table.where(table > 0)
    counts = values.notna().sum(axis=0)
    reference = values.median(axis=0).where(counts >= MIN_CURVES_AT_SIZE)
    log_ratio = np.log(values.div(reference, axis=1))
    score = log_ratio.median(axis=1, skipna=True)
    z = robust_z(score)
    out = pd.DataFrame({"median_ratio": np.exp(score), "robust_z": z}, index=table.index)
    return out.reindex(out["robust_z"].abs().sort_values(ascending=False, na_position="last").index)


def robust_z(score: pd.Series) -> pd.Series:
    """(score - median) / (1.4826 MAD); MAD 0 falls back on the mean absolute deviation; both 0:
    NaN (every curve alike)."""
    valid = score.dropna()
    if len(valid) < MIN_CURVES_AT_SIZE:
        return pd.Series(np.nan, index=score.index)
    centre = float(valid.median())
    dev = (valid - centre).abs()
    scale = MAD_TO_SIGMA * float(dev.median())
    if scale <= 0:
        scale = MEAN_AD_TO_SIGMA * float(dev.mean())
    if scale <= 0:
        return pd.Series(np.nan, index=score.index)
    return (score - centre) / scale


def outliers(scores: pd.DataFrame) -> pd.DataFrame:
    """The rows of curve_scores whose |robust z| reaches OUTLIER_Z and whose median ratio is
    MIN_EFFECT or more away from 1 (either way)."""
    effect = np.log(scores["median_ratio"]).abs() >= np.log1p(MIN_EFFECT)
    return scores[(scores["robust_z"].abs() >= OUTLIER_Z) & effect]


def band(table: pd.DataFrame) -> pd.DataFrame:
    """Per size (index): n, median, p5, p95, min, max over the curves (positive values only)."""
    values = table.where(table > 0)
    out = pd.DataFrame({"n": values.notna().sum(axis=0), "median": values.median(axis=0),
                        "p5": values.quantile(0.05, axis=0), "p95": values.quantile(0.95, axis=0),
                        "min": values.min(axis=0), "max": values.max(axis=0)})
    return out[out["n"] > 0].sort_index()


BAND_STYLE = {"minmax": ("0.85", "min-max of the other curves"), "p5p95": ("0.65", "p5-p95 of the other curves"),
              "median": ("0.15", "median of the other curves")}


def draw_band(ax, table: pd.DataFrame, scores: pd.DataFrame, colors: dict, labels: dict) -> dict:
    """Draw the band of the non-outlier curves and the drawn outliers on ``ax``; return the legend
    handles by label. ``labels``: curve (index value) -> its legend text; ``colors`` by that text."""
    flagged = outliers(scores)
    drawn = list(flagged.index[:MAX_LABELLED])
    rest = band(table.drop(index=flagged.index))
    handles = {}
    if not rest.empty:
        x = rest.index.to_numpy()
        col, text = BAND_STYLE["minmax"]
        handles[text] = ax.fill_between(x, rest["min"], rest["max"], color=col, alpha=0.6, linewidth=0, label=text)
        col, text = BAND_STYLE["p5p95"]
        handles[text] = ax.fill_between(x, rest["p5"], rest["p95"], color=col, alpha=0.7, linewidth=0, label=text)
        col, text = BAND_STYLE["median"]
        handles[text], = ax.plot(x, rest["median"], color=col, linewidth=1.5, label=text)
    for curve in drawn:
        pts = table.loc[curve].dropna()
        pts = pts[pts > 0]
        lab = labels[curve]
        if not pts.empty:
            handles[lab], = ax.plot(pts.index, pts.values, marker="o", markersize=3, color=colors[lab], label=lab)
    return handles


def outlier_label(label: str, row) -> str:
    """'node0100 (x1.30, z 9.2)': the curve, its median ratio to the others and its z."""
    return f"{label} (x{row['median_ratio']:.2f}, z {row['robust_z']:.1f})"
