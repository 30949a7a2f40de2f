"""Launch groups: Cases that share (ranks, ranks_per_node, environment, multicast opt-in, hosts,
NCCL profiling) run in one MPI job, because NCCL and NVSHMEM read their environment (and NCCL its
profiler plugin) once per process. What the Cases' families need in that environment from process
start (``Family.launch_env``) is merged into it when the launch starts (``declared_env``)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..errors import SuiteError
from ..families.base import Case


@dataclass(frozen=True)
class Launch:
    """One MPI job: Cases sharing (ranks, ranks_per_node, environment)."""

    launch_id: int
    ranks: int
    ranks_per_node: int
    env: tuple[tuple[str, str], ...]
    variant: str
    case_ids: tuple[str, ...]
    hosts: tuple[str, ...] = ()
    nccl_profile: bool = False   # ranks load commbench's NCCL profiler plugin
    search: tuple = ()   # placement: search's settings: a template over ``hosts``, run wave by wave


def group_launches(cases: list[Case]) -> list[Launch]:
    """One launch per distinct (ranks, ranks_per_node, env, multicast opt-in, hosts, nccl profiling),
    in first-seen order."""
    groups: dict[tuple, list[Case]] = {}
    for c in cases:
        key = (c.ranks, c.ranks_per_node, c.env, bool(c.param("allow_multicast")), c.hosts, c.profile == "nccl",
               c.param("search") or ())
        groups.setdefault(key, []).append(c)
    out = []
    for i, ((ranks, rpn, env, _mc, hosts, nccl_profile, search), cs) in enumerate(groups.items()):
        out.append(Launch(launch_id=i, ranks=ranks, ranks_per_node=rpn, env=env,
                          variant=cs[0].variant, case_ids=tuple(c.case_id for c in cs), hosts=hosts,
                          nccl_profile=nccl_profile, search=search))
    return out


def declared_env(cases: list[Case], env: Mapping[str, str], log_dir: Path) -> dict[str, str]:
    """The variables the Cases' families declare they need from process start (``Family.launch_env``),
    given the environment the ranks would otherwise get and the run's logs folder. A variable two
    Cases declare keeps the first Case's value."""
    from ..families import get_family

    out: dict[str, str] = {}
    for case in cases:
        for key, value in get_family(case.family).launch_env(case, env, log_dir).items():
            out.setdefault(key, str(value))
    return out


def keep_only(suite, names: list[str]) -> None:
    """Keep the Cases of the named benchmarks; launch ids and Case ids stay those of the whole suite."""
    known = list(dict.fromkeys(c.bench for c in suite.cases))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SuiteError(f"{suite.path}: --only {', '.join(map(str, unknown))}: no such benchmark "
                         f"(the suite has: {', '.join(map(str, known))})")
    suite.cases = [c for c in suite.cases if c.bench in names]
    kept = {c.case_id for c in suite.cases}
    launches = []
    for launch in suite.launches:
        ids = tuple(cid for cid in launch.case_ids if cid in kept)
        if ids:
            launches.append(dataclasses.replace(launch, case_ids=ids))
    suite.launches = launches
