"""A rule's verdict on a run: select its rows, aggregate the metric, compare (to a baseline)."""
from __future__ import annotations

from ...runfolder.schema import POINT_KEY

import math

import pandas as pd

from .copy_pairs import slow_pairs
from .outcome import Verdict
from .rules import Rule, metric_unit
from commbench.analysis import rehearsal
from commbench.runfolder.reader import Run
from commbench.runfolder.schema import TIME_COLUMNS
from commbench.units import format_size

# within_pct_of compares the run and the baseline on the points both hold (these columns, where
# both runs have them), never on two different sets of points.
# Direction of "worse" for within_pct_of; other metrics are judged two-sided.
HIGHER_IS_BETTER = ("_gbps", "tokens_per_s", "msgs_per_s")
LOWER_IS_BETTER = tuple(TIME_COLUMNS)


def _match(series: pd.Series, value) -> pd.Series:
    if isinstance(value, bool) or isinstance(series.dtype, pd.BooleanDtype) or series.dtype == bool:
        return series.astype(str).str.lower() == str(value).lower()
    if isinstance(value, (int, float)) and pd.api.types.is_numeric_dtype(series):
        return series == value
    return series.astype(str) == str(value)


def select(df: pd.DataFrame, rule: Rule) -> pd.DataFrame:
    """Rows matching every selector term (a column absent from the run matches nothing)."""
    mask = pd.Series(True, index=df.index)
    for col, term in rule.select.terms:
        if col not in df.columns:
            return df.iloc[0:0]
        kind = term[0]
        if kind == "eq":
            mask &= _match(df[col], term[1])
        elif kind == "in":
            m = pd.Series(False, index=df.index)
            for v in term[1]:
                m |= _match(df[col], v)
            mask &= m
        else:
            num = pd.to_numeric(df[col], errors="coerce")
            if term[1] is not None:
                mask &= num >= term[1]
            if term[2] is not None:
                mask &= num <= term[2]
    return df[mask]


def _aggregate(rows: pd.DataFrame, rule: Rule) -> tuple[float, str]:
    vals = pd.to_numeric(rows[rule.metric], errors="coerce").dropna()
    agg = {"min": vals.min, "median": vals.median, "max": vals.max, "mean": vals.mean}[rule.aggregate]()
    where = ""
    if rule.aggregate in ("min", "max") and len(vals) and "size_bytes" in rows.columns:
        r = rows.loc[vals.idxmin() if rule.aggregate == "min" else vals.idxmax()]
        where = f" at {r.get('op', '')} {r.get('backend', '')} {format_size(int(r['size_bytes']))}"
    return float(agg), where


def _direction(metric: str) -> int:
    if metric.endswith(HIGHER_IS_BETTER):
        return 1
    if metric in LOWER_IS_BETTER:
        return -1
    return 0


def evaluate_rule(rule: Rule, run: Run, baseline: Run | None) -> Verdict:
    """The rule's verdict on the run, naming its metric and unit."""
    v = _evaluate_rule(rule, run, baseline)
    v.metric, v.unit = f"{rule.aggregate}({rule.metric})", metric_unit(rule.metric)
    return v


def _evaluate_rule(rule: Rule, run: Run, baseline: Run | None) -> Verdict:
    rows = select(run.results, rule)
    ok = rows[rows["status"] == "ok"] if "status" in rows.columns else rows
    desc = f"{rule.aggregate}({rule.metric}) over {len(ok)} ok of {len(rows)} selected rows"
    nums = {"rows_selected": len(rows), "rows_ok": len(ok), "op": rule.op}   # Verdict.numbers, filled as judged
    if rule.min_rows == 0 and ok.empty:
        return _ruling(nums, rule.name, True, desc, "n/a",
                       "not applicable: no rows selected (min_rows 0 makes this rule optional)")
    if len(ok) < max(rule.min_rows, 1):
        return _ruling(nums, rule.name, False, desc, f"at least {max(rule.min_rows, 1)} ok rows",
                       "the selector matched too few ok rows (wrong selector, or points failed)")
    shared = rehearsal.shared_mask(ok)
    if shared.any() and rehearsal.is_speed_metric(rule.metric):   # never judge speed on a rehearsal
        most = int(pd.to_numeric(ok[rehearsal.COLUMN], errors="coerce").max())
        return _ruling(nums, rule.name, False, desc, f"{rule.metric} measured with one rank per GPU",
                       f"{int(shared.sum())} selected row(s): " + rehearsal.shared_reason(most))
    value, where = _aggregate(ok, rule)
    nums["value"] = value
    if math.isnan(value):
        return _ruling(nums, rule.name, False, desc, "a number", f"{rule.metric} is empty")
    if rule.op in (">=", "<="):
        passed = value >= rule.value if rule.op == ">=" else value <= rule.value
        nums["threshold"] = rule.value
        reason = f"{value:.4g}{where} {'meets' if passed else 'misses'} {rule.op} {rule.value:g}"
        if not passed:   # copy rows: every GPU pair (or GPU) that misses it, by name
            reason += slow_pairs(ok, rule.metric, rule.op, rule.value)
        return _ruling(nums, rule.name, passed, f"{value:.4g}", f"{rule.op} {rule.value:g}", reason)
    nums["pct"] = rule.pct
    if baseline is None:
        return _ruling(nums, rule.name, False, f"{value:.4g}", f"within {rule.pct:g}% of baseline",
                       "within_pct_of needs a baseline run (--baseline RUN)")
    base_rows = select(baseline.results, rule)
    base_ok = base_rows[base_rows["status"] == "ok"] if "status" in base_rows.columns else base_rows
    base_shared = rehearsal.shared_mask(base_ok)
    if base_shared.any() and rehearsal.is_speed_metric(rule.metric):   # nor against a rehearsal
        most = int(pd.to_numeric(base_ok[rehearsal.COLUMN], errors="coerce").max())
        return _ruling(nums, rule.name, False, f"{value:.4g}", f"within {rule.pct:g}% of baseline",
                       f"baseline: {int(base_shared.sum())} selected row(s): " + rehearsal.shared_reason(most))
    if base_ok.empty:
        return _ruling(nums, rule.name, False, f"{value:.4g}", f"within {rule.pct:g}% of baseline",
                       "the selector matched no ok rows in the baseline run")
    ok, base_ok = _shared_points(ok, base_ok)
    if ok.empty:
        return _ruling(nums, rule.name, False, desc, f"within {rule.pct:g}% of baseline",
                       "no comparable points: the selected ok rows of the run and of the baseline share no "
                       f"point ({', '.join(c for c in POINT_KEY if c in run.results.columns)})")
    value, where = _aggregate(ok, rule)
    base_value, _ = _aggregate(base_ok, rule)
    nums.update(value=value, baseline_value=base_value, points_shared=len(ok))
    if math.isnan(value) or math.isnan(base_value) or base_value == 0:
        return _ruling(nums, rule.name, False, f"{value:.4g}", f"within {rule.pct:g}% of baseline",
                       f"no comparison possible: baseline {rule.metric} is {base_value:.4g} on the shared points")
    change = (value / base_value - 1.0) * 100.0
    sign = 0 if rule.two_sided else _direction(rule.metric)
    worse_by = -change if sign == 1 else change if sign == -1 else abs(change)
    passed = worse_by <= rule.pct
    nums.update(change_pct=change, worse_by_pct=worse_by)
    reason = f"{value:.4g}{where} vs baseline {base_value:.4g}: {change:+.1f}%"
    return _ruling(nums, rule.name, passed, f"{value:.4g}",
                   f"within {rule.pct:g}% of {base_value:.4g}", reason)


def _ruling(numbers: dict, name: str, passed: bool, measured: str, expected: str, reason: str) -> Verdict:
    """A rule's Verdict with the numbers gathered so far (Verdict.numbers)."""
    return Verdict(name, "rule", passed, measured, expected, reason, numbers=dict(numbers))


def _shared_points(rows: pd.DataFrame, base: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of each side whose point (POINT_KEY columns both have) the other side also has."""
    cols = [c for c in POINT_KEY if c in rows.columns and c in base.columns]
    if not cols:
        return rows, base

    def keys(df: pd.DataFrame) -> pd.Series:
        return df[cols].astype(str).agg("|".join, axis=1) if len(df) else pd.Series([], dtype=str)
    k_rows, k_base = keys(rows), keys(base)
    return rows[k_rows.isin(set(k_base))], base[k_base.isin(set(k_rows))]
