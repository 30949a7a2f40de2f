"""The search planner on small fabrics with known bad nodes, GPUs and links; the simulator's names."""
from __future__ import annotations

import pytest

from commbench.placement.search_plan import Outcome, SearchPlanner, preview, worst_case_waves
from commbench.analysis.accept.simulate import run_one
from commbench.analysis.accept.search_check import search_verdicts


def drive(planner: SearchPlanner, slow_nodes=(), slow_net=(), slow_links=(), slow_gpu=None, gpus=4):
    """Play the planner's waves on a fabric without noise: a group fails when it holds a bad part."""
    while (wave := planner.next_wave()) is not None:
        assert len({n for g in wave for n in g}) == sum(len(g) for g in wave), "groups of a wave overlap"
        results = {}
        for g in wave:
            bad = any(n in slow_nodes for n in g) or (g[0] == (slow_gpu or ("",))[0])
            if len(g) >= 2:
                bad = bad or any(n in slow_net for n in g) or any(set(link) <= set(g) for link in slow_links)
            values = tuple(0.5 if slow_gpu and (g[0], i) == slow_gpu else 1.0 + 0.001 * i for i in range(gpus)) \
                if len(g) == 1 else ()
            results[g] = Outcome(not bad, values)
        planner.observe(results)
    return {(f.level, f.name, f.confidence) for f in planner.findings()}


NODES = [f"n{i:02d}" for i in range(32)]


def test_no_bad_part_names_nobody_in_few_waves():
    p = SearchPlanner(NODES, seed=1)
    assert drive(p) == set()
    assert p.waves <= 5 and p.summary()["proven_good"] == len(NODES)


def test_a_node_failing_alone_is_bad():
    assert drive(SearchPlanner(NODES, seed=2), slow_nodes={"n05"}) == {("node", "n05", "bad")}


def test_a_slow_gpu_is_named_with_its_index():
    assert drive(SearchPlanner(NODES, seed=3), slow_gpu=("n07", 2)) == {("gpu", "n07 gpu 2", "bad")}


@pytest.mark.parametrize("seed", range(5))
def test_a_slow_network_is_named_and_its_partners_cleared(seed):
    p = SearchPlanner(NODES, seed=seed)
    assert drive(p, slow_net={"n03", "n20"}) == {("network", "n03", "bad"), ("network", "n20", "bad")}
    assert p.waves <= 12


def test_a_slow_link_of_one_pair_is_named_when_a_matching_meets_it():
    seed = next(s for s in range(200) if ("n01", "n02") in _first_matching(s) or ("n02", "n01") in _first_matching(s))
    assert drive(SearchPlanner(NODES, seed=seed), slow_links={("n01", "n02")}) == {("link", "n01-n02", "bad")}


def _first_matching(seed):
    p = SearchPlanner(NODES, seed=seed)
    p.observe({g: True for g in p.next_wave()})
    return p.next_wave()


def test_the_same_seed_gives_the_same_waves():
    def waves(seed):
        p, out = SearchPlanner(NODES, seed=seed), []
        while (w := p.next_wave()) is not None:
            out.append(w)
            p.observe({g: not ("n04" in g and len(g) > 1) for g in w})
        return out
    assert waves(9) == waves(9)
    assert waves(9) != waves(10)


def test_a_wave_must_be_observed_whole():
    p = SearchPlanner(NODES, seed=0)
    wave = p.next_wave()
    with pytest.raises(RuntimeError):
        p.next_wave()
    with pytest.raises(ValueError):
        p.observe({wave[0]: True})


def test_verdicts_say_the_strategy_its_cost_and_the_names():
    p = SearchPlanner(NODES, seed=0)
    drive(p, slow_nodes={"n05"})
    vs = search_verdicts(p.summary())
    assert vs[0].check == "strategy search" and not vs[0].passed and "waves" in vs[0].measured
    assert [v.check for v in vs[1:]] == ["bad node n05"]


@pytest.mark.parametrize("bad", [0, 4])
def test_the_simulator_names_the_bad_parts_at_1024_nodes(bad):
    r = run_one(1024, bad, seed=7)
    assert r["waves"] <= 40 and r["true"] == bad and r["named"] == bad and r["right_part"] == bad


def test_placement_search_needs_two_hosts(tmp_path, monkeypatch):
    from commbench.errors import SuiteError
    from commbench.suite import load_suite

    monkeypatch.setenv("COMMBENCH_HOSTS", "a")
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nbenchmarks:\n  - {name: x, family: collectives, ops: [all_reduce], backends: [nccl], "
                 "ranks: 8, sizes: [1MiB], placement: search}\n")
    with pytest.raises(SuiteError, match="search needs at least 2 hosts"):
        load_suite(p, gpu_count=8)


def test_each_wave_names_its_phase_and_the_preview_is_a_passing_search():
    p = SearchPlanner(NODES, seed=4)
    phases = []
    while (w := p.next_wave()) is not None:
        phases.append(p.phase)
        p.observe({g: not ("n04" in g and len(g) > 1) for g in w})
    assert phases[:4] == ["alone", "match", "match", "groups"] and "confirm" in phases
    assert [ph for ph, _g in preview(NODES, 10, seed=4)] == ["alone", "match", "match", "groups"]
    assert worst_case_waves() == 13 and worst_case_waves(matchings=1, group_size=16) == 13
    assert len(phases) <= worst_case_waves()


def test_the_verdict_replays_the_stored_outcomes_and_refuses_a_foreign_or_unfinished_record():
    from commbench.analysis.accept.search_check import search_checks

    p, record = SearchPlanner(NODES, seed=5), {"nodes": NODES, "settings": {"seed": 5}, "waves": [], "bench": "b"}
    while (w := p.next_wave()) is not None:
        outcome = {g: "n09" not in g for g in w}
        record["waves"].append({"wave": p.waves, "phase": p.phase,
                                "groups": [{"hosts": list(g), "passed": ok, "why": "x"} for g, ok in outcome.items()]})
        p.observe(outcome)
    assert [v.check for v in search_checks({"searches": [record]})] == ["strategy search (b)"]   # not done
    record["done"] = True
    checks = search_checks({"searches": [record]})
    assert [v.check for v in checks] == ["strategy search (b)", "bad node n09"]
    assert "last failure: wave" in checks[1].reason
    record["settings"] = {"seed": 6}
    [foreign] = search_checks({"searches": [record]})
    assert not foreign.passed and "not the planner's" in foreign.reason


def test_a_pass_without_peers_to_compare_with_proves_no_one_good():
    nodes = [f"m{i}" for i in range(7)]
    p = SearchPlanner(nodes, seed=0, matchings=1)
    p.observe({g: True for g in p.next_wave()})
    wave = p.next_wave()   # 7 nodes: two pairs and a triple
    triple = next(g for g in wave if len(g) == 3)
    p.observe({g: Outcome(True, proven=len(g) == 2) for g in wave})
    assert not any(p.state[n].good for n in triple)
    assert all(p.state[n].good for g in wave if len(g) == 2 for n in g)


@pytest.mark.parametrize("bad", [0, 4])
def test_the_simulator_judged_as_the_launcher_judges_names_the_bad_parts(bad):
    r = run_one(1024, bad, seed=11, peers=True)
    assert r["waves"] <= 40 and r["true"] == bad and r["named"] == bad and r["right_part"] == bad
