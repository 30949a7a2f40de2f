"""Verdicts beyond the rules: bad rows, slow or late nodes and ranks, bad pairs of nodes."""
from __future__ import annotations

import dataclasses

import pandas as pd

from ...placement.blame import blame_pairs
from .localize import host_outliers, slow_from_samples
from .outcome import Verdict
from .pairs import as_findings, compare_pairs, pair_key, slow_pair_reasons
from .rule_check import evaluate_rule, select
from .rules import RuleSet
from commbench.runfolder.reader import Run
from commbench.units import format_size


def row_verdicts(run: Run, require_all_ok: bool) -> list[Verdict]:
    """Rows that fail on their own: wrong > 0, failed, timeout (and skipped if required)."""
    df = run.results
    bad_status = {"failed", "timeout", "wrong"} | ({"skipped"} if require_all_ok else set())
    wrong_col = (pd.to_numeric(df["wrong"], errors="coerce").fillna(0) if "wrong" in df.columns
                 else pd.Series(0, index=df.index))
    status_col = df["status"].astype(str) if "status" in df.columns else pd.Series("ok", index=df.index)
    bad = df[(wrong_col > 0) | status_col.isin(bad_status)]   # the few bad rows, never all rows one by one
    out = []
    for r in bad.to_dict("records"):
        wrong = r.get("wrong", 0) or 0
        status = r.get("status", "ok")
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
                               "time_us against its peers' median", **_subject(f["level"], f["name"]),
                               numbers={"median_excess_pct": float(f["median_excess_pct"]),
                                        "slow_cases": int(f["slow_cases"]), "cases": int(f["cases"]),
                                        "robust_z": _number(f["median_z"]),
                                        "min_excess_pct": ruleset.localize.min_excess_pct,
                                        "min_share": ruleset.localize.min_share}))
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
                    "late_rank, late_gap_us", **_subject(f["level"], f["name"]),
                    numbers={"late_cases": int(f["late_cases"]), "cases": int(f["cases"]),
                             "median_gap_us": _number(f["median_gap_us"]), "min_share": min_share})
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
    if "search_phase" in placed.columns:   # a search's groups are judged by its own check (search_check.py)
        placed = placed[placed["search_phase"].isna()]
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
                               "every pair passes", reason, "pairs of nodes", level="node", names=(blame["node"],),
                               numbers={"failing_pairs": len(blame["links"]), "pairs": len(passed)}))
        elif blame["links"]:
            links = ", ".join("-".join(p) for p in blame["links"])
            out.append(Verdict(f"bad links {links}", "node", False, links, "every pair passes", reason,
                               "pairs of nodes", level="link", names=tuple(",".join(p) for p in blame["links"]),
                               numbers={"failing_pairs": len(blame["links"]), "pairs": len(passed)}))
    single = placed[~placed["hosts"].astype(str).str.contains(",")]
    if "host" in single.columns and single["host"].nunique() >= 3:
        z = host_outliers(single, z_threshold=ruleset.localize.z_threshold if ruleset.localize else 3.5)
        for rec in z[z["flagged"]].to_dict("records") if not z.empty else []:
            out.append(Verdict(f"slow host {rec['host']}", "node", False, f"robust z {rec['median_z']:.1f}",
                               f"robust z < {ruleset.localize.z_threshold if ruleset.localize else 3.5:g}",
                               f"{rec['host']} is an outlier among the per-node runs",
                               "robust z of its time_us among the hosts", level="node", names=(str(rec["host"]),),
                               numbers={"robust_z": _number(rec["median_z"]),
                                "z_threshold": ruleset.localize.z_threshold if ruleset.localize else 3.5}))
    return out


def _subject(level: str, name: str) -> dict:
    """Verdict's level and names of a localisation finding: a host is a node; a rank is named by
    its number ('rank 3 (node03 gpu 1)' and 'rank 3' are rank '3')."""
    name = str(name)
    if level == "rank":
        return {"level": "rank", "names": (name.split()[1] if name.startswith("rank ") and len(name.split()) > 1
                                           else name,)}
    return {"level": "node", "names": (name[len("host "):] if name.startswith("host ") else name,)}


def _number(value) -> float | None:
    """A finding's number as a float; None for a missing one (NaN is not JSON)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out else None


def with_pair_findings(findings: pd.DataFrame, run: Run, ruleset: RuleSet) -> pd.DataFrame:
    """The localisation table plus one line per (pair, bench) of the pairwise rounds."""
    df = run.results
    if ruleset.localize is None or "hosts" not in df.columns:
        return findings
    pairs = df[df["hosts"].notna() & df["hosts"].astype(str).str.contains(",")]
    if "search_phase" in pairs.columns:
        pairs = pairs[pairs["search_phase"].isna()]
    loc = ruleset.localize
    extra = as_findings(compare_pairs(pairs, loc.pair_metric, loc.min_excess_pct, loc.min_share,
                                      loc.pair_min_excess_us))
    if extra.empty:
        return findings
    return extra if findings.empty else pd.concat([findings, extra], ignore_index=True)
