"""What `compare` shows of its points: per-op counts that add up, the worse and can't-tell points,
the repeats that would let it tell, as terminal text and as a Document (HTML and Markdown)."""
from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd

from .compare import CANT_TELL, MOST_REPEATS, UNSTABLE_PCT, VERDICTS, CompareSettings, regressions
from .compare_rule import format_floor, legend
from .text_table import text_table

WIDTH = 80             # prose lines wrap here; tables keep their width
CANT_TELL_SHOWN = 40   # terminal lines of can't-tell points; --out lists every one
# Columns that name a point; those that vary within a comparison are shown beside op/backend/size.
NAME_COLUMNS = ("variant", "dtype", "in_place", "timing", "world_size")


def noise_note(points: pd.DataFrame, settings: CompareSettings) -> str:
    """How the verdicts were decided, generated from compare_rule's rule (terminal and report)."""
    tested = int(points["p_value"].notna().sum()) if "p_value" in points else 0
    rules = legend(settings.threshold_pct, settings.alpha, settings.correction, tested)
    return "Verdicts, the first rule that holds: " + " ".join(rules)


def _gmean(values: pd.Series) -> float | None:
    vals = pd.to_numeric(values, errors="coerce").dropna()
    vals = vals[vals > 0]
    return round(float(np.exp(np.log(vals).mean())), 4) if len(vals) else None


def _counts(name: str, g: pd.DataFrame) -> dict:
    counts = g["verdict"].value_counts()
    return {"op": name, "points": len(g), "gmean_time_ratio": _gmean(g["time_ratio"]),
            "gmean_busbw_ratio": _gmean(g["busbw_ratio"]),
            **{v: int(counts.get(v, 0)) for v in VERDICTS},
            "unstable": int(g["unstable"].sum()) if "unstable" in g else 0}


def summarize(points: pd.DataFrame) -> pd.DataFrame:
    """Per op (and `all` when there are several): geometric-mean ratios and a count per verdict;
    every point has one verdict, so the verdict counts add up to `points`."""
    rows = [_counts(str(op), g) for op, g in points.groupby("op", sort=True)]
    if len(rows) > 1:
        rows.append(_counts("all", points))
    return pd.DataFrame(rows)


def repeats_advice(points: pd.DataFrame) -> str:
    """How many repeats (`run --repeat N` on both sides) would let compare tell its can't-tell
    points, or that repeats will not help the noisiest ones ("" when there are none)."""
    unsure = points[points["verdict"] == CANT_TELL]
    if unsure.empty:
        return ""
    need = pd.to_numeric(unsure["repeats_to_tell"], errors="coerce")
    helped = need[np.isfinite(need)]
    parts = [f"{len(unsure)} point(s) {CANT_TELL}: their change is within their noise floor, or the floor is "
             f"above any plausible change."]
    if len(helped):
        least, most = int(helped.min()), int(helped.max())
        fewest = (f"--repeat {least} would tell about {int((helped <= least).sum())} of them, "
                  if least < most else "")
        parts.append(f"With run --repeat N on both sides (compare the two folders): {fewest}--repeat {most} "
                     f"about {len(helped)}.")
    rest = len(unsure) - len(helped)
    if rest:
        parts.append(f"{rest} would need more than {MOST_REPEATS} repeats: their noise is too large for the "
                     f"change (a larger --threshold, a quieter machine, or finding the noise helps more).")
    return " ".join(parts)


def _fmt_pct(value, signed: bool = False) -> str:
    v = float(value) if value is not None else math.nan
    if math.isnan(v):
        return ""
    return f"{v:+.3g}" if signed else f"{v:.3g}"


def _fmt_repeats(value) -> str:
    v = float(value) if value is not None else math.nan
    return "" if math.isnan(v) else (f">{MOST_REPEATS}" if math.isinf(v) else str(int(v)))


def point_lines(points: pd.DataFrame, rows: pd.DataFrame, why: bool = False) -> pd.DataFrame:
    """Rows as a compact table: op, backend, the naming columns that vary, size, change, floor."""
    cols = ["op", "backend"] + [c for c in NAME_COLUMNS if c in points.columns
                                and points[c].astype(str).nunique() > 1] + ["size"]
    out = rows[[c for c in cols if c in rows.columns]].copy()
    out["change %"] = [_fmt_pct(v, signed=True) for v in rows["change_pct"]]
    out["noise floor"] = [format_floor(float(v)) if v == v else "" for v in rows["noise_pct"]]
    if "pct_of_bound_new" in rows and rows["pct_of_bound_new"].notna().any():
        out["% of bound"] = [_fmt_pct(v) for v in rows["pct_of_bound_new"]]   # NEW's busbw / its ceiling
    if (rows["verdict"] == CANT_TELL).any():
        out["repeats"] = [_fmt_repeats(v) for v in rows["repeats_to_tell"]]
    if why:
        out["verdict"] = list(rows["verdict"])
        if rows["why"].astype(str).str.len().any():
            out["why"] = list(rows["why"])
    return out.reset_index(drop=True)


def terminal_summary(points: pd.DataFrame, settings: CompareSettings,
                     fail_above_pct: float | None = None) -> list[str]:
    """The comparison as plain text: the counts (verdict columns that are all zero left out), how
    verdicts were decided, the worse points (those the gate fails are listed by the gate) and the
    can't-tell points, largest change first."""
    if points.empty:
        return ["no points to compare"]
    table = summarize(points).rename(columns={"gmean_time_ratio": "time", "gmean_busbw_ratio": "busbw"})
    table = table.drop(columns=["unstable", *(v for v in VERDICTS if not table[v].any())])
    prose = ["time, busbw: geometric mean of the NEW/BASE ratios over the points compared."]
    unstable = int(points["unstable"].sum())
    if unstable:
        prose.append(f"{unstable} of {len(points)} points unstable (samples or repeats spread over "
                     f"{UNSTABLE_PCT:g}%).")
    tested = int(points["p_value"].notna().sum()) if "p_value" in points else 0
    rules = legend(settings.threshold_pct, settings.alpha, settings.correction, tested)
    lines = [text_table(table), textwrap.fill(prose[0], WIDTH), "verdicts, the first rule that holds:",
             *(textwrap.fill(r, WIDTH, initial_indent="  ", subsequent_indent="     ") for r in rules),
             *(textwrap.fill(p, WIDTH) for p in prose[1:])]
    worse = points[points["verdict"] == "worse"].sort_values("change_pct", ascending=False)
    title = "worse"
    if fail_above_pct is not None:
        worse = worse.drop(regressions(points, fail_above_pct).index)
        title = f"worse by less than --fail-above {fail_above_pct:g}%"
    if len(worse):
        lines += ["", f"{title} ({len(worse)}):", text_table(point_lines(points, worse))]
    unsure = points[points["verdict"] == CANT_TELL]
    unsure = unsure.iloc[np.argsort(-np.abs(unsure["change_pct"].to_numpy(dtype=float)), kind="stable")]
    if len(unsure):
        lines += ["", f"{CANT_TELL} ({len(unsure)}):", text_table(point_lines(points, unsure.head(CANT_TELL_SHOWN)))]
        if len(unsure) > CANT_TELL_SHOWN:
            lines.append(f"... and {len(unsure) - CANT_TELL_SHOWN} more (--out FILE lists every point)")
        lines.append(textwrap.fill(repeats_advice(points), WIDTH))
    return lines


def _short(value, digits: int = 3) -> str:
    v = float(value) if value is not None else math.nan
    return "" if math.isnan(v) else f"{v:.{digits}g}"


def points_table(g: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """One op's points for the report: names that vary, size, both times, ratio, floor, verdict and
    why; numbers to 3 digits, so a row reads in one or two lines at 1400 px."""
    names = [c for c in ("backend", *NAME_COLUMNS) if c in points.columns and (c == "backend" or
                                                                             points[c].astype(str).nunique() > 1)]
    out = g[names + ["size"]].copy()
    out["base us"] = [_short(v) for v in g["time_base_us"]]
    out["new us"] = [_short(v) for v in g["time_new_us"]]
    out["ratio"] = [_short(v) for v in g["time_ratio"]]
    out["floor"] = [format_floor(float(v)) if v == v else "" for v in g["noise_pct"]]
    for col in ("bound_gbps", "pct_of_bound_base", "pct_of_bound_new"):   # each side's busbw / its ceiling
        if col in points and points[col].notna().any():
            out[col] = [_short(v) for v in g[col]]
    if (g["verdict"] == CANT_TELL).any():
        out["repeats"] = [_fmt_repeats(v) for v in g["repeats_to_tell"]]
    out["verdict"] = list(g["verdict"])
    out["why"] = list(g["why"])
    return out.reset_index(drop=True)


def compare_document(base_label: str, new_label: str, points: pd.DataFrame, settings: CompareSettings,
                     warnings: list[str] | None = None, outcome=None):
    """The comparison as a Document (HTML and Markdown through commbench.analysis.report)."""
    from .compare_plot import ratio_figure_png
    from .report.document import Document

    doc = Document(f"commbench compare: {base_label} -> {new_label}")
    sec = doc.section("Summary")
    for w in warnings or []:
        sec.text(f"Warning: {w}")
    if outcome is not None:
        sec.text(f"Gate: {outcome.sentence} (exit status {outcome.exit_status}).")
    sec.text("Ratios are NEW/BASE (time < 1 and busbw > 1 are faster); a side's time is the mean of its "
             "runs' log median times, or their median with 3 runs or more. Unstable points (samples or "
             f"repeats spread over {UNSTABLE_PCT:g}%) are marked; geometric means are over comparable "
             "points. Each point has one verdict: the verdict counts add up to points (new: only in NEW; "
             "missing: only in BASE).")
    sec.text(noise_note(points, settings))
    sec.table(summarize(points), "no points")
    advice = repeats_advice(points)
    if advice:
        sec.text(advice)
    if not points.empty:
        sec.image(ratio_figure_png(points), "time ratio NEW/BASE against size per op, with the noise band",
                  "compare_ratio.png")
    sec = doc.section("Points")
    for op, g in points.groupby("op", sort=True):
        sec.sub(str(op)).table(points_table(g, points))
    return doc
