"""Launch groups: Cases that share (ranks, ranks_per_node, environment, multicast opt-in, hosts)
run in one MPI job, because NCCL and NVSHMEM read their environment once per process."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

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


def group_launches(cases: list[Case]) -> list[Launch]:
    """One launch per distinct (ranks, ranks_per_node, env, multicast opt-in, hosts), in first-seen order."""
    groups: dict[tuple, list[Case]] = {}
    for c in cases:
        key = (c.ranks, c.ranks_per_node, c.env, bool(c.param("allow_multicast")), c.hosts)
        groups.setdefault(key, []).append(c)
    out = []
    for i, ((ranks, rpn, env, _mc, hosts), cs) in enumerate(groups.items()):
        out.append(Launch(launch_id=i, ranks=ranks, ranks_per_node=rpn, env=env,
                          variant=cs[0].variant, case_ids=tuple(c.case_id for c in cs), hosts=hosts))
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
