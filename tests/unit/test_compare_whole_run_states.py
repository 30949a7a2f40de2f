"""Noise a single run cannot see: a Case that sits in a slow state for a whole run (issue 40: 2.5 us
in one run, 17,020 us in the next, on an idle 2-core machine). Simulated pairs with such states in
both directions: no false alarm with single runs (19 of 20) or with 3 repeats (10 of 10), a 2x
slowdown of one op found with 3 repeats; and the n log n neighbour null against the exact one."""
from __future__ import annotations

import math
import time

import numpy as np

from commbench.analysis import noise
from commbench.analysis.compare import compare_runs
from tests.unit.noise_sim import Machine


def _run(m: Machine, rng, label: str, q: float, slow=None):
    """A simulated run where each Case sits, with probability q, in a state 100x-10,000x slower
    for the whole run (all its samples and its median)."""
    run = m.run(rng, label, slow)
    hit = rng.random(len(run.results)) < q
    factor = np.where(hit, 10.0 ** rng.uniform(2, 4, len(hit)), 1.0)
    by_case = dict(zip(run.results["case_id"], factor))
    run.results["time_us"] = run.results["time_us"] * factor
    run.samples["time_us"] = run.samples["time_us"] * run.samples["case_id"].map(by_case)
    return run


def test_single_runs_with_whole_run_states_raise_no_false_alarm_in_19_of_20():
    m, rng = Machine(), np.random.default_rng(40)
    alarms = []
    for i in range(20):
        pts = compare_runs(_run(m, rng, "a", 0.02), _run(m, rng, "b", 0.02))
        alarms.append(int((pts["verdict"] == "worse").sum()))   # what fails --fail-above
    assert sum(a == 0 for a in alarms) >= 19, alarms


def test_three_repeats_with_whole_run_states_raise_no_false_alarm():
    m, rng = Machine(), np.random.default_rng(41)
    for i in range(10):
        pts = compare_runs([_run(m, rng, f"a{k}", 0.05) for k in range(3)],
                           [_run(m, rng, f"b{k}", 0.05) for k in range(3)])
        assert (pts["verdict"] != "worse").all(), pts[pts["verdict"] == "worse"]


def test_three_repeats_find_a_2x_slowdown_among_whole_run_states():
    m, rng = Machine(), np.random.default_rng(42)
    slow = {("sendrecv", "mpi"): 2.0}
    caught = 0
    for i in range(10):
        pts = compare_runs([_run(m, rng, f"a{k}", 0.05) for k in range(3)],
                           [_run(m, rng, f"b{k}", 0.05, slow) for k in range(3)])
        op = (pts["op"] == "sendrecv") & (pts["backend"] == "mpi")
        caught += bool((pts.loc[op, "verdict"] == "worse").sum() >= 3)
        assert not (pts.loc[~op, "verdict"] == "worse").any()
    assert caught >= 9, caught


def _exact_neighbour_scale(d, s, k, curves):
    """The definition, point by point: the window of width + (own curve's size) ranks in log s
    centred on the point, the point's own curve left out, the median of the rest."""
    n = len(d)
    width = max(noise.MIN_POINTS_FOR_NULL, math.ceil(n * noise.NEIGHBOUR_SHARE))
    dev = np.abs(d - np.median(d)) / k
    order = np.argsort(np.log(s), kind="stable")
    rank = np.empty(n, dtype=int)
    rank[order] = np.arange(n)
    curve_of = np.array([hash(c) for c in curves])
    out = np.empty(n)
    for j in range(n):
        span = min(n, width + int((curve_of == curve_of[j]).sum()))
        start = min(max(0, rank[j] - span // 2), n - span)
        window = order[start:start + span]
        rest = window[curve_of[window] != curve_of[j]]
        out[j] = noise.MAD_TO_SIGMA * float(np.median(dev[rest])) * k[j]
    return out


def test_the_fast_neighbour_null_agrees_with_its_definition():
    rng = np.random.default_rng(3)
    for n, curve_len in ((152, 8), (2000, 20), (5000, 8)):
        d = rng.standard_t(4, n) * 0.05
        s = np.exp(rng.normal(-3, 1, n))
        k = np.full(n, math.sqrt(2))
        curves = [("op", i // curve_len) for i in range(n)]
        fast, exact = noise._neighbour_scale(d, s, k, curves), _exact_neighbour_scale(d, s, k, curves)
        err = np.abs(np.log(fast / exact))
        assert np.median(err) < 0.03 and err.max() < 0.15, (n, np.median(err), err.max())


def test_the_neighbour_null_of_100k_points_takes_well_under_a_second_or_two():
    rng = np.random.default_rng(4)
    n = 100_000
    d, s = rng.normal(0, 0.05, n), np.exp(rng.normal(-3, 1, n))
    t0 = time.process_time()
    out = noise._neighbour_scale(d, s, np.full(n, 1.0), [("op", i // 20) for i in range(n)])
    assert np.isfinite(out).all() and time.process_time() - t0 < 5.0
