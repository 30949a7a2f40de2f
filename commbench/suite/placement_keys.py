"""A benchmark's placement keys: ``placement`` (where its launches run: together, one per node, every
pair of nodes, or a search) with the host groups and waves it makes, and ``search`` (a search's
settings: schema.SEARCH_DEFAULTS filled in, each checked; its metric a numeric column)."""
from __future__ import annotations

import math

from .bench_keys import BenchKeys
from .metric_columns import metric_refusal
from .schema import PLACEMENTS, SEARCH_DEFAULTS


def host_groups(b: BenchKeys) -> list[tuple[str, ...]]:
    """() = anywhere; else one group per host (per_node) or per pair of hosts (pairs); for search, one
    group of every host (the template the launcher places wave by wave: launch/search_run.py)."""
    placement = b.get("placement", "together")
    if placement not in PLACEMENTS:
        b.add("placement", f"unknown placement {placement!r} (known: {', '.join(PLACEMENTS)})")
        return [()]
    if placement == "together":
        return [()]
    from ..sysinfo.hosts import allocation_hosts, round_robin_pairs

    hosts = allocation_hosts()
    if placement == "per_node":
        return [(h,) for h in hosts]
    if len(hosts) < 2:
        b.add("placement", f"{placement} needs at least 2 hosts, found {hosts} (set COMMBENCH_HOSTS or run in a "
                           f"Slurm allocation)")
        return [()]
    if placement == "search":
        return [tuple(hosts)]
    return [pair for rnd in round_robin_pairs(hosts) for pair in rnd]


def search_settings(b: BenchKeys) -> tuple[tuple[str, object], ...]:
    """placement: search's settings (schema.SEARCH_DEFAULTS filled in), or () for other placements."""
    given = b.get("search")
    if b.get("placement", "together") != "search":
        if "search" in b.bench:   # under defaults it serves the benchmarks that search
            b.add("search", "applies to placement: search only")
        return ()
    given = {} if given is None else given
    if not isinstance(given, dict):
        b.add("search", f"a mapping of {', '.join(SEARCH_DEFAULTS)}")
        return tuple(SEARCH_DEFAULTS.items())
    out = dict(SEARCH_DEFAULTS)
    for key, value in given.items():
        default = SEARCH_DEFAULTS.get(key)
        if default is None:
            b.add(f"search.{key}", f"unknown setting (known: {', '.join(SEARCH_DEFAULTS)})")
        elif isinstance(default, str):
            refusal = metric_refusal(value) if key == "metric" else None
            if not isinstance(value, str) or not value.strip():
                b.add(f"search.{key}", f"a results column name, got {value!r}")
            elif refusal:
                b.add(f"search.{key}", refusal)
            else:
                out[key] = value
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or (isinstance(default, int) and not isinstance(value, int)) \
                or value < (0 if key in ("seed", "matchings") else 1 if isinstance(default, int) else 0) \
                or (key == "min_share" and value > 1):
            what = ("a whole number >= 0" if key in ("seed", "matchings") else "a whole number >= 1"
                    if isinstance(default, int) else "a number in 0..1" if key == "min_share" else "a number >= 0")
            b.add(f"search.{key}", f"expected {what}, got {value!r}")
        else:
            out[key] = value
    return tuple(out.items())


def wave_of(groups: list[tuple[str, ...]]) -> dict[tuple[str, ...], int]:
    """The wave of each host group, in order: a group joins the current wave while it shares no
    host with it (all per_node groups: wave 0; pairs: one round of disjoint pairs a wave)."""
    waves, wave, busy = {}, 0, set()
    for group in groups:
        if not group:
            continue
        if busy & set(group):
            wave, busy = wave + 1, set()
        busy |= set(group)
        waves[group] = wave
    return waves
