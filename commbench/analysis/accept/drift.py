"""Burn-in rules: a rule's ``drift_pct`` / ``spread_pct`` judged per node over the passes of a
`run --duration` folder. Per node and pass the rule's aggregate of its metric over the selected ok
rows; a node fails when it sagged more than drift_pct from its first to its last pass, or its
per-pass values spread more than spread_pct (of their median). A failure names node and pass."""
from __future__ import annotations

from commbench.analysis import burnin
from commbench.runfolder.schema import PASS_COLUMN

from .rules import Rule, metric_unit


def burnin_checks(run, rules: list[Rule], select_rows) -> list[dict]:
    """Verdict fields (check, passed, measured, expected, reason, metric, unit) for every rule with
    drift_pct or spread_pct (one per failing node, else one that passes) and, on a burn-in, one
    for the rows of every pass. ``select_rows(df, rule)`` is accept's selector."""
    rules = [r for r in rules if r.drift_pct is not None or r.spread_pct is not None]
    if not rules and not maybe_burnin(run):
        return []
    df = burnin.pass_rows(run.path)
    return [c for rule in rules for c in _rule_checks(rule, df, select_rows)] + _pass_rows_check(df)


def maybe_burnin(run) -> bool:
    """Whether ``run`` may hold stamped passes, told from what is loaded already (reading every
    pass's rows back from results.jsonl costs seconds at 100,000 rows). A pass that ended stamped
    its samples before its rows, so a burn-in whose rows of the last pass are not stamped (cut
    short) still has ``pass`` in samples.csv; a folder with neither column has no pass that ended,
    except a burn-in begun by a commbench whose samples had no ``pass`` (docs/results.md) and cut in
    a pass that measured every Case again."""
    return PASS_COLUMN in run.results.columns or PASS_COLUMN in getattr(run.samples, "columns", ())


def _pass_rows_check(df) -> list[dict]:
    """A burn-in fails when any pass holds a row not correct or not finished, even one a later pass
    measured again (the last pass's rows are judged by accept's row checks as usual)."""
    if df.empty:
        return []
    bad = burnin.failing_rows(df)
    base = {"check": "burn-in: every pass's rows", "metric": "status and wrong", "unit": "",
            "expected": "ok in every pass"}
    if bad.empty:
        return [{**base, "passed": True, "measured": f"{df['pass'].nunique()} pass(es) ok",
                 "reason": "no row of any pass was wrong, failed or timed out"}]
    first = bad.iloc[0]
    shown = ", ".join(f"pass {int(r['pass'])} {r.get('op', '')} {r.get('case_id', '')} on {r['node']}: "
                      f"{r['status']}" for _, r in bad.head(5).iterrows())
    return [{**base, "passed": False, "measured": f"{len(bad)} row(s) in {bad['pass'].nunique()} pass(es)",
             "reason": f"first in pass {int(first['pass'])} on {first['node']}; {shown}"
                       + (" ..." if len(bad) > 5 else "")}]


def _bounds(rule: Rule) -> str:
    parts = ([f"drift <= {rule.drift_pct:g}%"] if rule.drift_pct is not None else []) + \
            ([f"spread <= {rule.spread_pct:g}%"] if rule.spread_pct is not None else [])
    return ", ".join(parts)


def _rule_checks(rule: Rule, df, select_rows) -> list[dict]:
    metric = f"{rule.aggregate}({rule.metric}) per pass"
    base = {"metric": metric, "unit": "%", "expected": _bounds(rule)}
    table = burnin.per_pass(select_rows(df, rule), rule.metric, rule.aggregate) if not df.empty else df
    trends = burnin.trends(table, rule.metric) if not table.empty else []
    if not trends:
        passes = int(df["pass"].nunique()) if not df.empty else 0
        optional = rule.min_rows == 0
        return [{**base, "check": rule.name, "passed": optional, "measured": f"{passes} pass(es)",
                 "reason": ("not applicable: " if optional else "") +
                           "drift and spread need a burn-in (`run --duration`) whose selected ok rows "
                           "span at least 2 passes on a node"}]
    out = []
    for t in trends:
        why = []
        if rule.drift_pct is not None and t.drift_pct > rule.drift_pct:
            why.append(f"sagged {t.drift_pct:.1f}% from pass 1's {t.first:.4g} to the last pass's "
                       f"{t.last:.4g} (bound {rule.drift_pct:g}%)")
        if rule.spread_pct is not None and t.spread_pct > rule.spread_pct:
            why.append(f"spread {t.spread_pct:.1f}% across {t.passes} passes (bound {rule.spread_pct:g}%)")
        if why:
            unit = metric_unit(rule.metric)
            out.append({**base, "check": f"{rule.name} on {t.node}", "passed": False,
                        "measured": f"drift {t.drift_pct:.1f}%, spread {t.spread_pct:.1f}%",
                        "reason": f"node {t.node}: " + "; ".join(why)
                                  + f"; worst pass {t.worst_pass} ({t.worst:.4g}{' ' + unit if unit else ''})"})
    if not out:
        worst = max(trends, key=lambda t: t.drift_pct)
        out.append({**base, "check": rule.name, "passed": True,
                    "measured": f"drift {worst.drift_pct:.1f}% at most, spread "
                                f"{max(t.spread_pct for t in trends):.1f}% at most",
                    "reason": f"{len(trends)} node(s) over {max(t.passes for t in trends)} passes within "
                              f"{_bounds(rule)}"})
    return out
