"""Acceptance: evaluate rules on a run -> verdicts (pass/fail with reasons), JUnit XML, report."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pandas as pd

from .drift import burnin_checks
from .localize import blame_pairs, host_outliers, slow_from_samples
from .pairs import as_findings, compare_pairs, pair_key, slow_pair_reasons
from .rules import Rule, RuleSet, check_columns, metric_unit, with_derived_columns
from commbench.analysis import rehearsal
from commbench.runfolder.reader import Run
from commbench.runfolder.schema import TIME_COLUMNS
from commbench.units import format_size

# within_pct_of compares the run and the baseline on the points both hold (these columns, where
# both runs have them), never on two different sets of points.
POINT_KEY = ("family", "op", "backend", "variant", "dtype", "size_bytes", "world_size", "in_place", "timing")
# Direction of "worse" for within_pct_of; other metrics are judged two-sided.
HIGHER_IS_BETTER = ("_gbps", "tokens_per_s", "msgs_per_s")
LOWER_IS_BETTER = tuple(TIME_COLUMNS)


@dataclass
class Verdict:
    check: str  # rule name, or 'row ...' / 'node ...' for built-in checks
    kind: str  # rule | row | node
    passed: bool
    measured: str
    expected: str
    reason: str
    metric: str = ""   # what measured and expected are: min(busbw_gbps), status and wrong, ...
    unit: str = ""     # the unit of bare numbers in measured and expected (GB/s, us); else ""


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
    if rule.min_rows == 0 and ok.empty:
        return Verdict(rule.name, "rule", True, desc, "n/a",
                       "not applicable: no rows selected (min_rows 0 makes this rule optional)")
    if len(ok) < max(rule.min_rows, 1):
        return Verdict(rule.name, "rule", False, desc, f"at least {max(rule.min_rows, 1)} ok rows",
                       "the selector matched too few ok rows (wrong selector, or points failed)")
    shared = rehearsal.shared_mask(ok)
    if shared.any() and rehearsal.is_speed_metric(rule.metric):   # never judge speed on a rehearsal
        most = int(pd.to_numeric(ok[rehearsal.COLUMN], errors="coerce").max())
        return Verdict(rule.name, "rule", False, desc, f"{rule.metric} measured with one rank per GPU",
                       f"{int(shared.sum())} selected row(s): " + rehearsal.shared_reason(most))
    value, where = _aggregate(ok, rule)
    if math.isnan(value):
        return Verdict(rule.name, "rule", False, desc, "a number", f"{rule.metric} is empty")
    if rule.op in (">=", "<="):
        passed = value >= rule.value if rule.op == ">=" else value <= rule.value
        reason = f"{value:.4g}{where} {'meets' if passed else 'misses'} {rule.op} {rule.value:g}"
        return Verdict(rule.name, "rule", passed, f"{value:.4g}", f"{rule.op} {rule.value:g}", reason)
    if baseline is None:
        return Verdict(rule.name, "rule", False, f"{value:.4g}", f"within {rule.pct:g}% of baseline",
                       "within_pct_of needs a baseline run (--baseline RUN)")
    base_rows = select(baseline.results, rule)
    base_ok = base_rows[base_rows["status"] == "ok"] if "status" in base_rows.columns else base_rows
    base_shared = rehearsal.shared_mask(base_ok)
    if base_shared.any() and rehearsal.is_speed_metric(rule.metric):   # nor against a rehearsal
        most = int(pd.to_numeric(base_ok[rehearsal.COLUMN], errors="coerce").max())
        return Verdict(rule.name, "rule", False, f"{value:.4g}", f"within {rule.pct:g}% of baseline",
                       f"baseline: {int(base_shared.sum())} selected row(s): " + rehearsal.shared_reason(most))
    if base_ok.empty:
        return Verdict(rule.name, "rule", False, f"{value:.4g}", f"within {rule.pct:g}% of baseline",
                       "the selector matched no ok rows in the baseline run")
    ok, base_ok = _shared_points(ok, base_ok)
    if ok.empty:
        return Verdict(rule.name, "rule", False, desc, f"within {rule.pct:g}% of baseline",
                       "no comparable points: the selected ok rows of the run and of the baseline share no "
                       f"point ({', '.join(c for c in POINT_KEY if c in run.results.columns)})")
    value, where = _aggregate(ok, rule)
    base_value, _ = _aggregate(base_ok, rule)
    if math.isnan(value) or math.isnan(base_value) or base_value == 0:
        return Verdict(rule.name, "rule", False, f"{value:.4g}", f"within {rule.pct:g}% of baseline",
                       f"no comparison possible: baseline {rule.metric} is {base_value:.4g} on the shared points")
    change = (value / base_value - 1.0) * 100.0
    sign = 0 if rule.two_sided else _direction(rule.metric)
    worse_by = -change if sign == 1 else change if sign == -1 else abs(change)
    passed = worse_by <= rule.pct
    reason = f"{value:.4g}{where} vs baseline {base_value:.4g}: {change:+.1f}%"
    return Verdict(rule.name, "rule", passed, f"{value:.4g}",
                   f"within {rule.pct:g}% of {base_value:.4g}", reason)


def _shared_points(rows: pd.DataFrame, base: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of each side whose point (POINT_KEY columns both have) the other side also has."""
    cols = [c for c in POINT_KEY if c in rows.columns and c in base.columns]
    if not cols:
        return rows, base

    def keys(df: pd.DataFrame) -> pd.Series:
        return df[cols].astype(str).agg("|".join, axis=1) if len(df) else pd.Series([], dtype=str)
    k_rows, k_base = keys(rows), keys(base)
    return rows[k_rows.isin(set(k_base))], base[k_base.isin(set(k_rows))]


def row_verdicts(run: Run, require_all_ok: bool) -> list[Verdict]:
    """Rows that fail on their own: wrong > 0, failed, timeout (and skipped if required)."""
    df = run.results
    bad_status = {"failed", "timeout", "wrong"} | ({"skipped"} if require_all_ok else set())
    out = []
    for r in df.to_dict("records"):
        wrong = r.get("wrong", 0) or 0
        status = r.get("status", "ok")
        if wrong > 0 or status in bad_status:
            size = format_size(int(r["size_bytes"])) if pd.notna(r.get("size_bytes")) else "?"
            name = f"row {r.get('op')} {r.get('backend')} {r.get('variant')} {r.get('dtype')} {size}"
            out.append(Verdict(name, "row", False, f"status={status} wrong={int(wrong)}",
                               "status=ok wrong=0", str(r.get("reason") or status), "status, wrong"))
    return out


def node_verdicts(run: Run, ruleset: RuleSet) -> tuple[list[Verdict], pd.DataFrame]:
    if ruleset.localize is None:
        return [], pd.DataFrame()
    ok_ids = run.results.loc[run.results["status"] == "ok", "case_id"] if "case_id" in run.results else None
    findings = slow_from_samples(run.samples, ok_ids, ruleset.localize)
    out = []
    if not findings.empty:
        for f in findings[findings["flagged"]].to_dict("records"):
            out.append(Verdict(f"slow {f['level']} {f['name']}", "node", False,
                               f"+{f['median_excess_pct']}% in {f['slow_cases']}/{f['cases']} cases",
                               f"< +{ruleset.localize.min_excess_pct:g}% vs the others",
                               f"{f['name']} is consistently slower than its peers "
                               f"(median excess {f['median_excess_pct']}%, robust z {f['median_z']})",
                               "time_us against its peers' median"))
    out += late_verdicts(run, ruleset.localize.min_share)
    return out, findings


def late_verdicts(run: Run, min_share: float) -> list[Verdict]:
    """A rank (or host) that arrives late, by its own delay, in most multi-rank Cases (skew columns)."""
    from commbench.profile.skew import LATE_MIN_GAP_US, late_findings

    late = late_findings(run.results, min_share)
    return [Verdict(f"late {f['name']}", "node", False,
                    f"late in {f['late_cases']}/{f['cases']} cases, own delay {f['median_gap_us']} us",
                    f"late in < {min_share:.0%} of cases",
                    f"{f['name']} arrives last at the op by its own delay (median {f['median_gap_us']} us "
                    f">= {LATE_MIN_GAP_US:g} us) in most Cases: the others wait for it (late_rank, skew_us)",
                    "late_rank, late_gap_us")
            for f in (late[late["flagged"]].to_dict("records") if not late.empty else [])]


def placement_verdicts(run: Run, ruleset: RuleSet, baseline: Run | None = None) -> list[Verdict]:
    """Per-node and pairwise placements (`hosts` column): name the bad node or the bad links.

    A pair passes when all its rows are ok and every rule that selects its rows passes on them
    alone; blame_pairs then names the node common to every failing pair. Per-node rows are
    compared across hosts by robust z (needs 3 or more hosts)."""
    df = run.results
    if "hosts" not in df.columns:
        return []
    out = []
    placed = df[df["hosts"].notna() & (df["hosts"].astype(str) != "")]
    pairs = placed[placed["hosts"].astype(str).str.contains(",")]
    if not pairs.empty:
        passed, why = {}, {}
        for hosts, rows in pairs.groupby("hosts"):
            sub = dataclasses.replace(run, results=rows)
            wrong = (pd.to_numeric(rows["wrong"], errors="coerce").fillna(0) if "wrong" in rows
                     else pd.Series(0, index=rows.index))
            rows_ok = rows["status"].eq("ok").all() and not (wrong > 0).any()
            verdicts = [evaluate_rule(r, sub, baseline) for r in ruleset.rules if r.op and not select(rows, r).empty]
            key = pair_key(hosts)
            passed[key] = bool(rows_ok and all(v.passed for v in verdicts))
            if not rows_ok:
                bad = rows["status"].ne("ok") | (wrong > 0)
                why[key] = f"{int(bad.sum())} row(s) not ok ({', '.join(sorted(set(rows.loc[bad, 'status'])))})"
            elif not passed[key]:
                why[key] = "fails " + ", ".join(v.check for v in verdicts if not v.passed)
        if ruleset.localize is not None:  # and the pairs against each other (analysis/accept/pairs.py)
            metric = ruleset.localize.pair_metric
            loc = ruleset.localize
            table = compare_pairs(pairs, metric, loc.min_excess_pct, loc.min_share, loc.pair_min_excess_us)
            for key, text in slow_pair_reasons(table, metric).items():
                passed[key] = False
                why[key] = f"{why[key]}; {text}" if key in why else text
        blame = blame_pairs(passed)
        detail = "; ".join(f"{'-'.join(p)}: {why[p]}" for p in blame["links"] if p in why)
        reason = f"{blame['why']} ({detail})" if detail else blame["why"]
        if blame["node"] is not None:
            out.append(Verdict(f"bad node {blame['node']}", "node", False, f"{len(blame['links'])} failing pair(s)",
                               "every pair passes", reason, "pairs of nodes"))
        elif blame["links"]:
            links = ", ".join("-".join(p) for p in blame["links"])
            out.append(Verdict(f"bad links {links}", "node", False, links, "every pair passes", reason,
                               "pairs of nodes"))
    single = placed[~placed["hosts"].astype(str).str.contains(",")]
    if "host" in single.columns and single["host"].nunique() >= 3:
        z = host_outliers(single, z_threshold=ruleset.localize.z_threshold if ruleset.localize else 3.5)
        for rec in z[z["flagged"]].to_dict("records") if not z.empty else []:
            out.append(Verdict(f"slow host {rec['host']}", "node", False, f"robust z {rec['median_z']:.1f}",
                               f"robust z < {ruleset.localize.z_threshold if ruleset.localize else 3.5:g}",
                               f"{rec['host']} is an outlier among the per-node runs",
                               "robust z of its time_us among the hosts"))
    return out


def evaluate(run: Run, ruleset: RuleSet, baseline: Run | None = None) -> tuple[list[Verdict], pd.DataFrame]:
    """All verdicts for a run (rules, bad rows, slow nodes) and the localisation table."""
    run, baseline = with_derived_columns(run, ruleset), with_derived_columns(baseline, ruleset)
    check_columns(ruleset, run.results.columns)
    verdicts = [evaluate_rule(rule, run, baseline) for rule in ruleset.rules if rule.op]
    verdicts += [Verdict(kind="rule", **c) for c in burnin_checks(run, ruleset.rules, select)]
    verdicts += row_verdicts(run, ruleset.require_all_ok)
    nodes, findings = node_verdicts(run, ruleset)
    nodes += placement_verdicts(run, ruleset, baseline)
    findings = _with_pair_findings(findings, run, ruleset)
    suspects = ", ".join(v.check.split(" ", 2)[2] for v in nodes if v.check.startswith("slow host"))
    if suspects:
        for v in verdicts:
            if v.kind == "rule" and not v.passed:
                v.reason += f"; suspect host(s): {suspects}"
    return verdicts + nodes, findings


def _with_pair_findings(findings: pd.DataFrame, run: Run, ruleset: RuleSet) -> pd.DataFrame:
    """The localisation table plus one line per (pair, bench) of the pairwise rounds."""
    df = run.results
    if ruleset.localize is None or "hosts" not in df.columns:
        return findings
    pairs = df[df["hosts"].notna() & df["hosts"].astype(str).str.contains(",")]
    loc = ruleset.localize
    extra = as_findings(compare_pairs(pairs, loc.pair_metric, loc.min_excess_pct, loc.min_share,
                                      loc.pair_min_excess_us))
    if extra.empty:
        return findings
    return extra if findings.empty else pd.concat([findings, extra], ignore_index=True)


def verdict_table(verdicts: list[Verdict]) -> pd.DataFrame:
    return pd.DataFrame([{"check": v.check, "kind": v.kind, "result": "pass" if v.passed else "fail",
                          "metric": v.metric, "measured": v.measured, "expected": v.expected, "unit": v.unit,
                          "reason": v.reason}
                         for v in verdicts])


def machine_warnings(run: Run, baseline: Run | None = None) -> list[str]:
    """One line per run (and baseline) whose machine was busy (run.json's machine_load): a verdict
    on such a run holds, but its times may be slow or noisy, and a reader must be told."""
    from commbench.sysinfo.load import describe

    named = [("run " + run.label, run)] + ([("baseline " + baseline.label, baseline)] if baseline else [])
    return [w for w in (describe(label, r.meta) for label, r in named) if w]


def accept_document(run: Run, ruleset: RuleSet, verdicts: list[Verdict], findings: pd.DataFrame,
                    warnings: list[str] = ()):
    from commbench.analysis.report.document import Document

    failed = sum(not v.passed for v in verdicts)
    doc = Document(f"commbench accept: {run.label}: {'FAIL' if failed else 'PASS'}"
                   + (" (busy machine)" if warnings else ""))
    sec = doc.section("Verdict")
    sec.text(f"{len(verdicts)} checks, {failed} failed. Rules from {ruleset.path}. Rows with "
             "wrong > 0, failed or timeout fail on their own"
             + (", and so do skipped rows (require_all_ok)." if ruleset.require_all_ok else "."))
    for w in warnings:
        sec.text(f"Warning: {w}.")
    sec.table(verdict_table(verdicts))
    if ruleset.localize is not None:
        sec = doc.section("Slow nodes and GPUs")
        sec.text(f"Per Case, each host's (and rank's) median time against the median of the "
                 f"others; flagged when at least {ruleset.localize.min_excess_pct:g}% slower in "
                 f"at least {ruleset.localize.min_share:.0%} of its Cases. Robust z uses the "
                 "median and MAD across hosts (needs 3 or more).")
        sec.table(findings, "no per-rank samples to compare")
    return doc


def search_verdicts(summary: dict) -> list[Verdict]:
    """The `search` strategy's verdicts (analysis/accept/search.py, SearchPlanner.summary()): one line
    saying what ran and how long it took, then one failing check per name, with its confidence."""
    found = summary["findings"]
    cost = f"{summary['waves']} waves, {summary['launches']} launches over {summary['nodes']} nodes"
    out = [Verdict(f"strategy {summary['strategy']}", "node", not found, cost, "no node, GPU or link named",
                   f"{cost}; {summary['proven_good']} nodes proven good in a passing group of two or more; "
                   f"named {len(summary['bad'])} bad, {len(summary['suspect'])} suspect", "host groups")]
    for f in found:
        out.append(Verdict(f"{f.confidence} {f.level} {f.name}", "node", False, f.confidence,
                           "passes alone and in groups", f.evidence, "host groups"))
    return out
