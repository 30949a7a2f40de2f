"""Pairwise rounds compared with each other (analysis/accept/pairs.py) and the verdicts built on them."""
import itertools
import random
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from commbench.analysis.accept.node_check import placement_verdicts
from commbench.analysis.accept.pairs import compare_pairs
from commbench.analysis.accept.rules import RulesError, load_rules
from commbench.analysis.accept.verdict import evaluate
from commbench.runfolder.reader import Run

NODES = ["node-1", "node-2", "node-3", "node-4", "node-5"]  # hyphens: names are split on ',' only
# a rule file needs a rule; this one selects nothing and is optional
NO_RULE = '{name: none, select: {op: gather}, metric: time_us, op: "<=", value: 1, min_rows: 0}'
POINTS = [("bw", "all_reduce", 1 << 20), ("bw", "sendrecv", 1 << 20), ("bw", "all_reduce", 4 << 20),
          ("lat", "all_reduce", 8), ("lat", "sendrecv", 8)]


def _rows(slow=lambda a, b, bench: 1.0, noise=0.0, seed=0) -> pd.DataFrame:
    rnd = random.Random(seed)
    rows = []
    for a, b in itertools.combinations(NODES, 2):
        for bench, op, size in POINTS:
            base = 10.0 + size / 1e5
            t = base * slow(a, b, bench) * (1 + rnd.uniform(0, noise))
            rows.append({"bench": bench, "op": op, "backend": "mpi", "variant": "default", "dtype": "float32",
                         "size_bytes": size, "time_us": t, "time_us_min": t, "status": "ok", "wrong": 0,
                         "hosts": f"{a},{b}", "case_id": f"{a}{b}{bench}{op}{size}"})
    return pd.DataFrame(rows)


def _ruleset(tmp_path, localize="{min_excess_pct: 200, min_share: 0.75, pair_metric: time_us_min}"):
    path = tmp_path / "rules.yaml"
    path.write_text(f"localize: {localize}\nrules: [{NO_RULE}]\n")
    return load_rules(path)


def _run(df: pd.DataFrame) -> Run:
    return Run(path=Path("/tmp/none"), results=df, samples=pd.DataFrame())


def test_a_slow_node_fails_every_pair_it_is_in(tmp_path):
    df = _rows(lambda a, b, bench: 8.0 if "node-3" in (a, b) and bench == "bw" else 1.0, noise=0.5)
    table = compare_pairs(df, "time_us_min", 200, 0.75)
    flagged = table[table.flagged]
    assert sorted(flagged.pair) == ["node-1-node-3", "node-2-node-3", "node-3-node-4", "node-3-node-5"]
    assert set(flagged.bench) == {"bw"}  # the latency bench saw nothing
    verdicts = placement_verdicts(_run(df), _ruleset(tmp_path))
    assert [v.check for v in verdicts] == ["bad node node-3"]
    assert "3/3 points slower than the fastest pairs" in verdicts[0].reason


def test_a_slow_link_is_named_as_a_link(tmp_path):
    df = _rows(lambda a, b, bench: 6.0 if (a, b) == ("node-2", "node-5") and bench == "lat" else 1.0, noise=0.5)
    verdicts = placement_verdicts(_run(df), _ruleset(tmp_path))
    assert [v.check for v in verdicts] == ["bad links node-2-node-5"]


def test_noise_below_the_margin_blames_nobody(tmp_path):
    for seed in range(20):
        df = _rows(noise=1.5, seed=seed)  # up to 2.5x slower at random points
        assert placement_verdicts(_run(df), _ruleset(tmp_path)) == [], seed


def test_without_localize_pairs_are_judged_by_rules_only(tmp_path):
    df = _rows(lambda a, b, bench: 8.0 if "node-3" in (a, b) else 1.0)
    path = tmp_path / "rules.yaml"
    path.write_text(f"rules: [{NO_RULE}]\n")
    assert placement_verdicts(_run(df), load_rules(path)) == []


def test_pair_lines_join_the_localisation_table(tmp_path):
    df = _rows(lambda a, b, bench: 8.0 if "node-3" in (a, b) and bench == "bw" else 1.0)
    verdicts, findings = evaluate(_run(df), _ruleset(tmp_path))
    pairs = findings[findings.level == "pair"]
    assert len(pairs) == 10 * 2 and pairs.flagged.sum() == 4
    assert "node-1-node-3 (bw)" in set(pairs.name)


def test_too_few_pairs_are_not_compared():
    df = _rows(lambda a, b, bench: 8.0 if "node-3" in (a, b) else 1.0)
    two = df[df.hosts.isin(["node-1,node-3", "node-1,node-2"])]
    assert compare_pairs(two, "time_us", 200, 0.75).empty


def test_pair_metric_is_validated(tmp_path):
    with pytest.raises(RulesError, match=r"rules.yaml:1: field 'localize.pair_metric'"):
        _ruleset(tmp_path, "{pair_metric: busbw_gbps}")
    assert _ruleset(tmp_path, "true").localize.pair_metric == "time_us"


def test_failed_rows_of_a_dead_node_name_it(tmp_path):
    df = _rows()
    dead = df.hosts.str.contains("node-4")
    df.loc[dead, "status"] = "failed"
    df.loc[dead, "time_us_min"] = float("nan")
    verdicts = placement_verdicts(_run(df), _ruleset(tmp_path))
    assert [v.check for v in verdicts] == ["bad node node-4"]
    assert "row(s) not ok (failed)" in verdicts[0].reason


def test_the_per_node_z_threshold_comes_from_the_rules(tmp_path):
    rows = [{"op": "all_reduce", "backend": "mpi", "variant": "default", "dtype": "float32", "size_bytes": 1,
             "busbw_gbps": bw, "status": "ok", "hosts": h, "host": h, "case_id": h}
            for h, bw in zip(NODES, [1.0, 1.01, 0.99, 1.0, 0.7])]
    run = _run(pd.DataFrame(rows))
    assert [v.check for v in placement_verdicts(run, _ruleset(tmp_path, "true"))] == ["slow host node-5"]
    assert placement_verdicts(run, _ruleset(tmp_path, "{z_threshold: 50}")) == []


def test_a_lost_host_is_read_from_the_launcher_output(tmp_path):
    from commbench.launch.failure_hosts import hosts_the_launcher_lost as _hosts_the_launcher_lost

    log = tmp_path / "launch.log"
    log.write_text(textwrap.dedent("""\
        === launch 3 attempt 0: mpiexec ...
          Remote host:   n7
        === launch 3 attempt 1: mpiexec ...
        ssh: connect to host n2 port 22: No route to host
          Remote host:   n2
        """))
    assert _hosts_the_launcher_lost(log, ["n2", "n7", "n22"]) == ["n2"]  # the last attempt only
    log.write_text("=== launch 1 attempt 0\nPRTE has lost communication with a remote daemon.\n"
                   "  Remote daemon: [prterun-vm-1@0,2] on node n7\n")
    assert _hosts_the_launcher_lost(log, ["n1", "n7"]) == ["n7"]


def test_the_time_floor_ignores_jitter_of_tiny_messages_but_not_a_delay():
    # small MPI messages: 14 us, but some launches land at ~50 us (3.6x) for all their points
    jitter = _rows(lambda a, b, bench: 3.6 if (a, b) == ("node-1", "node-2") else 1.0)
    lat = jitter[jitter.bench == "lat"]
    assert compare_pairs(lat, "time_us_min", 100, 0.6).flagged.any()  # ratio alone: a false link
    assert not compare_pairs(lat, "time_us_min", 100, 0.6, min_excess_us=150).flagged.any()
    delayed = lat.copy()
    delayed.loc[delayed.hosts == "node-1,node-2", "time_us_min"] += 400  # +200 us per packet, 2 hops
    assert compare_pairs(delayed, "time_us_min", 100, 0.6, min_excess_us=150).flagged.sum() == 1
