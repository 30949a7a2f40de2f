"""placement: search, run for real: the planner (search_plan.py) chooses each wave's host groups, a
launch per group runs the benchmark's Cases on them (all launches of a wave at the same time), the
judge (search_judge.py) turns each group's rows into pass/fail, and the planner chooses the next
wave from those. Rows keep their hosts, the benchmark's ``wave`` and the planner's ``search_phase``.

The waves are a pure function of the seed and the outcomes, so a --resume replays the search from
the stored rows and runs only what is missing. run.json's ``searches`` keeps, per search, every
wave's groups and outcomes: accept's verdict replays the planner from them (analysis/accept/
search_check.py), so the run and its verdict name the same parts.

GPU health: after each wave, the health records its launches stored (health.jsonl, written by the
ranks as they ran) are judged by the default health rules (sysinfo/health_judge.py); a host that
fails is named by the planner at once, without a confirming wave, and the wave's record keeps
``unhealthy`` (host -> why) so accept's replay names it too.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ..errors import CommbenchError
from ..families.base import Case
from ..runfolder.health_files import load_health
from ..sysinfo.health_judge import unhealthy_hosts
from ..suite.launches import Launch
from ..placement.search_judge import GroupJudge, compared, gpu_values
from ..placement.search_plan import SETTINGS, STRATEGY, Outcome, SearchPlanner

Group = tuple[str, ...]
# run_wave(launches, cases, phase): runs the launches at once (their pending Cases) and returns
# when every one has ended; rows_of(case_ids): the stored rows of those Cases
RunWave = Callable[[list[Launch], list[Case], str], None]
RowsOf = Callable[[set], list[dict]]
SamplesOf = Callable[[], object]   # the run's per-rank samples (a pandas frame), read after the first wave
HealthOf = Callable[[set], dict]   # launch ids -> {host: why it fails GPU health} over those launches


def health_of_folder(run_dir) -> HealthOf:
    """The hosts that failed GPU health in the given launches, from the folder's health.jsonl. A
    record's host is the node's own name; a launch placed on one host given another name (a test
    bed's pseudo-host) is judged under the name the search gave it."""
    def of(launch_ids: set) -> dict:
        records = []
        for r in load_health(run_dir):
            given = r.get("launch_hosts") or []
            if len(given) == 1 and r["host"] not in given:
                r = {**r, "host": str(given[0])}
            records.append(r)
        return unhealthy_hosts(records, launch_ids=launch_ids)
    return of


def group_case(template: Case, group: Group, wave: int, phase: str) -> Case:
    """The template's Case placed on ``group``: ranks_per_node ranks on each of its hosts."""
    params = tuple(kv for kv in template.params if kv[0] != "search") + (("wave", wave), ("search_phase", phase))
    return dataclasses.replace(template, hosts=tuple(group), ranks=template.ranks_per_node * len(group),
                               params=params)


def planner_for(launch: Launch) -> SearchPlanner:
    settings = dict(launch.search)
    return SearchPlanner(launch.hosts, **{k: settings[k] for k in SETTINGS if k in settings})


def judge_for(launch: Launch) -> GroupJudge:
    s = dict(launch.search)
    return GroupJudge(s.get("metric", "time_us"), s.get("max_excess_pct", 50.0), s.get("min_share", 0.5))


def run_search(launch: Launch, templates: list[Case], first_launch_id: int, run_wave: RunWave,
               rows_of: RowsOf, record: dict, samples_of: SamplesOf | None = None,
               health_of: HealthOf | None = None) -> int:
    """Run one search to its end; ``record`` (run.json's entry) grows wave by wave. Returns the
    next free launch id. ``samples_of`` gives the first wave (every node alone) per-GPU values,
    which name a GPU that is an outlier among all of them; ``health_of`` the hosts that failed GPU
    health in a wave's launches (``health_of_folder``)."""
    planner, judge = planner_for(launch), judge_for(launch)
    record.update(strategy=STRATEGY, bench=templates[0].bench, nodes=list(planner.nodes),
                  settings=dict(launch.search), waves=[], done=False)
    next_id = first_launch_id
    while (groups := planner.next_wave()) is not None:
        wave, phase = planner.waves, planner.phase
        launches, cases, by_group = [], [], {}
        for group in groups:
            mine = [group_case(t, group, wave, phase) for t in templates]
            cases += mine
            by_group[tuple(group)] = {c.case_id for c in mine}
            launches.append(Launch(launch_id=next_id, ranks=mine[0].ranks, ranks_per_node=launch.ranks_per_node,
                                   env=launch.env, variant=launch.variant, case_ids=tuple(c.case_id for c in mine),
                                   hosts=tuple(group), nccl_profile=launch.nccl_profile))
            next_id += 1
        run_wave(launches, cases, phase)
        stored = rows_of(set().union(*by_group.values()))
        judged = judge.judge({g: [r for r in stored if r.get("case_id") in ids] for g, ids in by_group.items()})
        gpus = gpu_values(samples_of(), {g[0]: ids for g, ids in by_group.items()}) \
            if phase == "alone" and samples_of is not None else {}
        unhealthy, unread = _wave_health(health_of, {l.launch_id for l in launches}, set(planner.nodes))
        planner.observe({g: Outcome(ok, gpus.get(g[0], ()), compared(why)) for g, (ok, why) in judged.items()},
                        unhealthy)
        record["waves"].append({"wave": wave, "phase": phase, **({"unhealthy": unhealthy} if unhealthy else {}),
                                **({"health_unread": unread} if unread else {}), "groups": [
            {"hosts": list(g), "passed": ok, "why": why, **({} if compared(why) else {"proven": False}),
             **({"gpu_values": list(gpus[g[0]])} if g[0] in gpus and len(g) == 1 else {})}
            for g, (ok, why) in judged.items()]})
    summary = planner.summary()
    record.update(done=True, launches=planner.launches, bad=summary["bad"], suspect=summary["suspect"])
    return next_id


def _wave_health(health_of: HealthOf | None, launch_ids: set, nodes: set) -> tuple[dict, str]:
    """({host: why} of the search's hosts that failed health in these launches, why health.jsonl
    could not be read ("" when it could)): a damaged file never stops the search."""
    if health_of is None:
        return {}, ""
    try:
        return {h: why for h, why in health_of(launch_ids).items() if h in nodes}, ""
    except CommbenchError as exc:
        return {}, str(exc)
