"""Accept's verdict on a `placement: search` run: the planner replayed from the outcomes the run
stored (run.json's ``searches``), so the verdict names exactly what the run's waves found.

The replay feeds the planner (placement/search_plan.py) each stored wave's outcomes; the waves it
asks for must be the ones stored (same seed, same outcomes), else the record does not belong to
this planner and the check fails with the reason. A search the run did not finish (interrupted)
fails too: its names would be half made.

A node the search named for its GPU health (a wave's ``unhealthy``: judged as the wave ended, named
without a confirming wave) is the check ``bad node HOST (health)``, as accept's own health rules
name it (analysis/accept/health_rules.py); verdict.py keeps one check of that name.
"""
from __future__ import annotations

from commbench.placement.search_plan import SETTINGS, Outcome, SearchPlanner
from .outcome import Verdict
from .search_record import check_search_records


def replay(record: dict) -> tuple[dict | None, str]:
    """(the planner's summary, '') or (None, why the record cannot be replayed)."""
    try:
        settings = {k: v for k, v in dict(record.get("settings", {})).items() if k in SETTINGS}
        planner = SearchPlanner(record["nodes"], **settings)
        for stored in record["waves"]:
            asked = planner.next_wave()
            groups = [tuple(g["hosts"]) for g in stored["groups"]]
            if asked is None or sorted(map(tuple, asked)) != sorted(groups):
                return None, f"search wave {stored.get('wave')}: the stored groups are not the planner's"
            planner.observe({tuple(g["hosts"]): Outcome(bool(g["passed"]), tuple(g.get("gpu_values", ())),
                                                        bool(g.get("proven", True)))
                             for g in stored["groups"]}, dict(stored.get("unhealthy") or {}))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        return None, f"run.json's search record is damaged ({exc})"
    if not record.get("done") or planner.next_wave() is not None:
        return None, (f"the search stopped after {len(record['waves'])} wave(s) (interrupted?): "
                      "continue it with --resume")
    return planner.summary(), ""


def search_checks(meta: dict, where: str = "run.json") -> list[Verdict]:
    """Verdicts of every search the run holds (none for a run without one); a damaged record is a
    RunFolderError naming ``where`` (run.json's path) and its key (search_record.py)."""
    check_search_records(meta, where)
    out = []
    for record in meta.get("searches") or []:
        if not isinstance(record, dict):
            continue
        summary, why = replay(record)
        bench = record.get("bench", "?")
        if summary is None:
            out.append(Verdict(f"strategy search ({bench})", "node", False, "not judged", "a finished search",
                               why, "host groups"))
            continue
        out += search_verdicts({**summary, "bench": bench}, _reasons(record))
    return out


def _reasons(record: dict) -> dict[tuple, str]:
    """Each failing group's reason from its last failing wave, for the names' evidence."""
    out = {}
    for wave in record.get("waves", []):
        for g in wave.get("groups", []):
            if not g.get("passed"):
                out[tuple(sorted(g["hosts"]))] = f"wave {wave.get('wave')} ({wave.get('phase')}): {g.get('why')}"
    return out


def search_verdicts(summary: dict, reasons: dict | None = None) -> list[Verdict]:
    """The `search` strategy's verdicts (SearchPlanner.summary()): one line saying what ran, how many
    waves and launches it took and how sure its names are, then one failing check per name (a node
    is "bad" when it failed alone or in two or more failing groups, "suspect" in one only; a link
    is named only after failing 3 times while both its nodes pass with other partners)."""
    found = summary["findings"]
    bench = f" ({summary['bench']})" if summary.get("bench") else ""
    cost = f"{summary['waves']} waves, {summary['launches']} launches over {summary['nodes']} nodes"
    out = [Verdict(f"strategy search{bench}", "node", not found, cost, "no node, GPU or link named",
                   f"{cost}; {summary['proven_good']} nodes proven good in a passing group of two or more; "
                   f"named {len(summary['bad'])} bad, {len(summary['suspect'])} suspect", "host groups")]
    for f in found:
        seen = [why for group, why in (reasons or {}).items() if set(f.nodes) <= set(group)]
        evidence = f.evidence + (f"; last failure: {seen[-1]}" if seen else "")
        cause = f" ({f.cause})" if getattr(f, "cause", "") else ""
        out.append(Verdict(f"{f.confidence} {f.level} {f.name}{cause}", "node", False, f.confidence,
                           "healthy GPUs" if cause else "passes alone and in groups", evidence,
                           "GPU health" if cause else "host groups", level=f.level,
                           names=(",".join(f.nodes),) if f.level == "link" else (f.name,)))
    return out


def merge_health(search: list[Verdict], health: list[Verdict]) -> list[Verdict]:
    """The search's verdicts then accept's health verdicts, one check per name: where both name
    ``bad node HOST (health)``, accept's (its rules, every problem) stays and says the search named
    it too."""
    by_name = {v.check: v for v in health}
    out = []
    for v in search:
        twin = by_name.get(v.check)
        if twin is None:
            out.append(v)
        else:
            twin.reason += f"; the search named it too: {v.reason}"
    return out + health
