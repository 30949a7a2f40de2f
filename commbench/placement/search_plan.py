"""Find the bad nodes without all pairs: waves of disjoint host groups, chosen from the last results.

Pure planning, nothing launched: ``next_wave()`` gives host groups that may run at the same time
(``phase`` names the step that chose them), ``observe()`` takes each group's pass/fail (and, for
nodes alone, per-GPU values when measured). The launcher (launch/search_run.py), the simulator
(analysis/accept/simulate.py) and accept's verdict (which replays the outcomes a run stored) drive
this one planner, so the three name the same parts from the same outcomes.

1. every node alone (one wave), and a node that fails alone twice more (a failure may be a flaky
   launch): then it is bad, and per-GPU values of the first wave name the GPU;
2. a few random perfect matchings of the nodes that passed alone (one wave each): the cheap screen
   for a node's network (NIC, cable, switch port), which only shows when it talks to another node;
3. the nodes not yet failing, in groups of ``group_size`` (one wave), then halves of each failing
   group (one wave per halving) down to pairs: the same at a larger scale;
4. each suspect paired with a node already proven good, a different one each time, until it
   passes once (cleared) or fails ``confirmations`` times (named).

A node that fails GPU health (the ``unhealthy`` hosts ``observe()`` is told after a wave: an XID, a
new double-bit ECC error, a PCIe link trained down, ...; judged by sysinfo/health_judge.py) is named
"bad" at once, without a confirming wave, and leaves the search: no later wave places it, and a
group that failed with it in it blames none of its other members (the failure is explained; a
failing group of four or more is still halved without it, so a second bad part there is found).

A node is proven good once it passed in a group of two or more (a pass judged on speed against
its peers: ``Outcome.proven``). A failing pair whose two nodes are both proven good elsewhere is
tried again, and named as a link after failing LINK_TRIES times in a row. Confidence: a node that
fails alone, or in two or more failing groups, is "bad"; in one failing group only, "suspect".
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import pandas as pd

from .blame import blame_pairs, robust_z

Group = tuple[str, ...]
STRATEGY = "search"
# alone: every node alone; again: a node that failed alone, once more; match: a random perfect
# matching; groups: groups of group_size; halves: halves of failing groups; confirm: suspects
# paired with proven-good nodes; link: a failing pair of cleared nodes, once more
PHASES = ("alone", "again", "match", "groups", "halves", "confirm", "link")
SETTINGS = ("seed", "matchings", "group_size", "confirmations", "max_waves")   # the suite's `search:` keys
ALONE_TRIES = 3   # a node is named from its own launches only after failing alone this many times in a row
LINK_TRIES = 3   # a pair of nodes that pass elsewhere is named only after failing this many times in a row


@dataclass
class Outcome:
    """One launch's result: passed, and for a node alone its GPUs' metric (higher is better).
    ``proven``: the pass was judged on speed too (a group with no peers to compare with passes on
    its rows' status only: it clears no one, nor proves its members good)."""
    passed: bool
    gpu_values: tuple[float, ...] = ()
    proven: bool = True


@dataclass
class Finding:
    level: str        # node | gpu | network (a node's link to the fabric) | link (one pair)
    name: str         # node, 'node gpu 3', 'a-b'
    nodes: Group
    confidence: str   # bad | suspect
    evidence: str
    cause: str = ""   # "health": named for its GPU health records, not for its timings


@dataclass
class _Node:
    alone_ok: bool | None = None
    good: bool = False                      # passed in a group of two or more
    failed_groups: list = field(default_factory=list)
    partners_tried: set = field(default_factory=set)
    confirm_fails: int = 0
    alone_fails: int = 0
    health: str = ""                        # why it fails GPU health ("": it does not, or nothing said so)
    health_wave: tuple = ()                 # (wave, phase) in which it did, waves counted from 0


class SearchPlanner:
    """Adaptive group testing over waves of disjoint host groups (module docstring)."""

    def __init__(self, nodes, seed: int = 0, matchings: int = 2, group_size: int = 8,
                 confirmations: int = 2, max_waves: int = 40, gpu_z_threshold: float = 5.0):
        self.nodes = list(dict.fromkeys(str(n) for n in nodes))
        if len(self.nodes) < 1:
            raise ValueError("search needs at least one node")
        self.rng = random.Random(seed)
        self.matchings, self.group_size = matchings, max(2, group_size)
        self.confirmations, self.max_waves = confirmations, max_waves
        self.gpu_z_threshold = gpu_z_threshold
        self._suspect_wave = True
        self.state = {n: _Node() for n in self.nodes}
        self.waves = self.launches = 0
        self.findings_alone: list[Finding] = []
        self.pair_results: dict[Group, list[bool]] = {}
        self._phase, self._matching, self._failing, self._wave = "alone", 0, [], None
        self.phase = ""   # the step that chose the wave in flight (PHASES)
        self._gpu_z = pd.Series(dtype=float)

    # -- planning -----------------------------------------------------------------------------
    def next_wave(self) -> list[Group] | None:
        """The next wave's disjoint host groups, or None when the search is done."""
        if self._wave is not None:
            raise RuntimeError("observe() the last wave before asking for the next")
        while self.waves < self.max_waves:
            phase = self._phase   # _plan may move on to the next step as it plans this one
            wave = self._plan()
            if wave is None:
                return None
            if wave:
                self._wave = wave
                self.phase = phase if phase != "confirm" or self._suspect_wave else "link"
                return wave
        return None

    def _plan(self) -> list[Group] | None:
        """A wave for the current phase; [] moves on to the next phase, None ends the search."""
        healthy = [n for n in self.nodes if self.state[n].alone_ok and not self.state[n].health]
        if self._phase == "alone":
            return [(n,) for n in self.nodes]
        if self._phase == "again":   # a node that failed alone once more: one failure may be a flake
            again = [(n,) for n in self.nodes if self.state[n].alone_ok is False and not self.state[n].health
                     and self.state[n].alone_fails < ALONE_TRIES]
            if not again:
                self._phase = "match"
            return again
        if self._phase == "match":
            if self._matching >= self.matchings or len(healthy) < 2:
                self._phase = "groups"
                return []
            self._matching += 1
            return _chunks(self.rng.sample(healthy, len(healthy)), 2)
        if self._phase == "groups":
            self._phase = "halves"
            pool = [n for n in healthy if not self.state[n].failed_groups]
            return _chunks(self.rng.sample(pool, len(pool)), self.group_size) if len(pool) >= 4 else []
        if self._phase == "halves":
            halves = [h for g in self._failing if len(g) >= 4 for h in (g[: len(g) // 2], g[len(g) // 2:])]
            self._failing = []
            if not halves:
                self._phase = "confirm"
                return []
            return halves
        return self._confirm_wave()

    def _confirm_wave(self) -> list[Group] | None:
        good = [n for n in self.nodes if self.state[n].good and not self.state[n].health]
        pending = [n for n in self.suspects() if self.state[n].confirm_fails < self.confirmations]
        wave, used = [], set()
        self._suspect_wave = True
        for s in pending:
            partner = next((g for g in good if g not in used and g not in self.state[s].partners_tried), None)
            if partner is not None:
                used.add(partner)
                wave.append((s, partner))
        if not wave:   # suspects done: a failing pair whose two nodes passed elsewhere, once more
            self._suspect_wave = False
            for p in self._cleared_failing_pairs():   # disjoint ones now, the others in a later wave
                if len(self.pair_results[p]) < LINK_TRIES and not any(self.pair_results[p]) \
                        and not used.intersection(p):
                    used.update(p)
                    wave.append(p)
        return wave or None

    # -- observing ----------------------------------------------------------------------------
    def observe(self, results: dict, unhealthy: dict[str, str] | None = None) -> None:
        """Results of the last wave: group -> Outcome (or a bool, pass/fail); ``unhealthy``: host ->
        why it failed GPU health in this wave's launches (named at once, out of the search)."""
        if self._wave is None:
            raise RuntimeError("no wave is in flight")
        wave, self._wave = self._wave, None
        missing = [g for g in wave if tuple(g) not in results]
        if missing:
            raise ValueError(f"no result for {len(missing)} group(s) of the wave, e.g. {missing[0]}")
        out = {tuple(g): r if isinstance(r, Outcome) else Outcome(bool(r)) for g, r in results.items()}
        self.waves += 1
        self.launches += len(wave)
        self._observe_health(unhealthy or {})
        if self._phase in ("alone", "again"):
            self._observe_alone(out)
            self._phase = "again"
            return
        failing = []
        for g in wave:
            g, o = tuple(g), out[tuple(g)]
            if len(g) == 2:
                self.pair_results.setdefault(tuple(sorted(g)), []).append(o.passed)
            if o.passed:
                for n in g:
                    self.state[n].good |= o.proven
                continue
            if any(self.state[n].health for n in g):   # explained: no partner blamed; halve the rest
                failing.append(tuple(n for n in g if not self.state[n].health))
                continue
            failing.append(g)
            for n in g:
                self.state[n].failed_groups.append(g)
            if self._phase == "confirm" and not self.state[g[0]].good:
                self.state[g[0]].confirm_fails += 1
        if self._phase == "confirm":
            for g in wave:
                self.state[g[0]].partners_tried.add(g[1])
        if self._phase in ("groups", "halves"):
            self._failing = failing

    def _observe_health(self, unhealthy: dict[str, str]) -> None:
        for host, why in unhealthy.items():
            st = self.state.get(str(host))
            if st is not None and not st.health:
                st.health, st.health_wave = str(why) or "fails GPU health", (self.waves - 1, self.phase)

    def _observe_alone(self, out: dict[Group, Outcome]) -> None:
        if self._phase == "alone":   # GPUs compared across the whole first wave, where healthy ones are the majority
            gpu = pd.Series({(g[0], i): v for g, o in out.items() for i, v in enumerate(o.gpu_values)},
                            dtype=float)
            self._gpu_z = robust_z(gpu) if len(gpu) >= 3 else pd.Series(dtype=float)
        z = self._gpu_z
        for g, o in out.items():
            node = g[0]
            self.state[node].alone_ok = o.passed
            self.state[node].alone_fails += not o.passed
            if o.passed or self.state[node].alone_fails < ALONE_TRIES or self.state[node].health:
                continue
            slow = [i for (n, i), zv in z.items() if n == node and zv <= -self.gpu_z_threshold]
            if slow and len(slow) < sum(1 for (n, _i) in z.index if n == node):
                for i in slow:
                    self.findings_alone.append(Finding("gpu", f"{node} gpu {i}", (node,), "bad",
                                                       f"fails alone; GPU {i} is an outlier among all GPUs "
                                                       f"(robust z {z[(node, i)]:.1f})"))
            else:
                self.findings_alone.append(Finding("node", node, (node,), "bad", "fails alone"))

    # -- naming -------------------------------------------------------------------------------
    def suspects(self) -> list[str]:
        """Nodes that passed alone, failed in a group, and are not proven good."""
        return [n for n in self.nodes if self.state[n].alone_ok and self.state[n].failed_groups
                and not self.state[n].good and not self.state[n].health]

    def findings(self) -> list[Finding]:
        out = self._health_findings() + list(self.findings_alone)
        for n in self.suspects():
            st = self.state[n]
            mine = {p: all(oks) for p, oks in self.pair_results.items() if n in p}
            blame = blame_pairs(mine) if mine else {"node": None}
            groups = len(set(st.failed_groups))
            sure = "bad" if groups >= 2 else "suspect"
            why = (f"passes alone, fails in {groups} group(s) of two or more "
                   f"({st.confirm_fails} of them with a node proven good)")
            if blame["node"] == n:
                why += f"; {blame['why']}"
            out.append(Finding("network", n, (n,), sure, why))
        for g in self._cleared_failing_pairs():
            tries = self.pair_results[g]
            if len(tries) >= LINK_TRIES and not any(tries):   # fewer failures are as likely flaky launches
                out.append(Finding("link", "-".join(g), g, "bad",
                                   f"this pair failed {len(tries)} of {len(tries)} times; both nodes pass "
                                   "with other partners"))
        return out

    def _health_findings(self) -> list[Finding]:
        out = []
        for n in self.nodes:
            st = self.state[n]
            if st.health:
                wave, phase = st.health_wave
                out.append(Finding("node", n, (n,), "bad", f"fails GPU health in wave {wave} ({phase}), named "
                                                           f"without a confirming wave: {st.health}", cause="health"))
        return out

    def _cleared_failing_pairs(self) -> list[Group]:
        """Failing pairs whose two nodes are both proven good elsewhere (alone-bad nodes excluded)."""
        return sorted(p for p, oks in self.pair_results.items()
                      if not all(oks) and all(self.state[n].good and self.state[n].alone_ok
                                              and not self.state[n].health for n in p))

    def summary(self) -> dict:
        found = self.findings()
        return {"strategy": STRATEGY, "waves": self.waves, "launches": self.launches,
                "nodes": len(self.nodes), "bad": sorted(f.name for f in found if f.confidence == "bad"),
                "suspect": sorted(f.name for f in found if f.confidence == "suspect"),
                "proven_good": sum(s.good for s in self.state.values()), "findings": found}


def _chunks(order: list[str], size: int) -> list[Group]:
    """Consecutive groups of ``size``; a short last group joins the one before it."""
    groups = [tuple(order[i:i + size]) for i in range(0, len(order), size)]
    if len(groups) >= 2 and len(groups[-1]) < size:
        last = groups.pop()
        groups[-1] += last
    return groups


def worst_case_waves(matchings: int = 2, group_size: int = 8, confirmations: int = 2,
                     max_waves: int = 40) -> int:
    """The most waves a search takes while every suspect finds a proven-good partner in one wave:
    alone, twice again, the matchings, the groups, each halving down to pairs, the confirmations and
    the link retries. More only when suspects outnumber proven-good nodes; never above max_waves."""
    halvings = max(0, (max(2, group_size) - 1).bit_length() - 1)
    return min(max_waves, 1 + (ALONE_TRIES - 1) + matchings + 1 + halvings + confirmations + LINK_TRIES)


def preview(nodes, waves: int = 4, **settings) -> list[tuple[str, list[Group]]]:
    """The first waves of a search in which every launch passes: (phase, groups) each."""
    planner, out = SearchPlanner(nodes, **settings), []
    while len(out) < waves and (wave := planner.next_wave()) is not None:
        out.append((planner.phase, wave))
        planner.observe({g: True for g in wave})
    return out
