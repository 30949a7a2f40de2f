"""Clock alignment over MPI (4 real ranks, known artificial offsets) and the skew arithmetic."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from commbench.profile import skew
from commbench.profile.clock import ClockOffset
from tests.conftest import needs_mpi

ROOT = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent("""
    import json, sys, time
    from commbench.profile import clock
    from commbench.world import build_world
    world = build_world()
    real = time.perf_counter_ns
    shift = world.rank * 1_000_000_007 * (-1) ** world.rank     # rank r's clock reads this far off
    if world.rank:
        clock.time.perf_counter_ns = lambda: real() + shift
    offs = clock.estimate_offsets(world)
    clock.time.perf_counter_ns = real
    same = clock.estimate_offsets(world)                        # true clocks: one host, one clock
    if world.rank == 0:
        json.dump({"shifted": [[o.offset_ns, o.error_ns] for o in offs],
                   "same": [[o.offset_ns, o.error_ns] for o in same]}, open(sys.argv[1], "w"))
""")


@needs_mpi
def test_offsets_recover_known_clock_shifts_within_the_stated_error(tmp_path):
    from commbench.launch.mpiexec import find_mpiexec

    script, out = tmp_path / "w.py", tmp_path / "out.json"
    script.write_text(WORKER)
    argv = [find_mpiexec(), "-n", "4", "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    proc = subprocess.run(argv + [sys.executable, str(script), str(out)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import json

    got = json.loads(out.read_text())
    for rank, (offset, err) in enumerate(got["shifted"]):
        truth = rank * 1_000_000_007 * (-1) ** rank
        assert abs(offset - truth) <= err, (rank, offset, truth, err)
        assert err < 5_000_000   # a round trip on one host is far below 10 ms even on a busy machine
    assert all(o == [0, 0] for o in got["same"])


def test_arrivals_host_mode_stamps_around_each_op():
    a = skew.Arrivals(rank=0)
    op = a.wrap(lambda: None)
    for _ in range(3):
        op()
    line, source = a.timeline("host", [1.0, 1.0, 1.0])
    assert source == "host" and len(line) == 3
    assert all(s <= e for s, e in line) and line[0][1] <= line[1][0]


def test_arrivals_events_mode_uses_the_later_of_stream_free_and_enqueue():
    a = skew.Arrivals(rank=0)
    a.before, a.after = [1_000, 2_000, 500_000], [1_100, 2_100, 500_100]
    # 100 us per op; the third op was enqueued late (its host stalled), so the event after the
    # second op fired at 201 us but the third op only began at 500 us and ended at 600 us
    line, source = a.timeline("events", [100.0, 100.0, 399.0])
    assert source == "events"
    assert line[0] == (1_000, 101_000)
    assert line[1] == (101_000, 201_000)
    assert line[2] == (500_000, 600_000)
    assert a.timeline("graph", [1.0]) is None


def test_injected_delay_names_its_rank(monkeypatch):
    assert skew.injected_delay_ns(2, {"COMMBENCH_INJECT_DELAY": "2:200"}) == 200_000
    assert skew.injected_delay_ns(1, {"COMMBENCH_INJECT_DELAY": "2:200"}) == 0
    assert skew.injected_delay_ns(1, {"COMMBENCH_INJECT_DELAY": "junk"}) == 0


def _spans(starts, ends):
    return [list(zip(s, e)) for s, e in zip(starts, ends)]


def test_case_skew_median_and_the_rank_late_by_its_own_delay():
    us = 1_000
    # three ranks, four iterations of 100 us; rank 2 waits 200 us before each of its ops
    starts = [[0, 300 * us, 600 * us, 900 * us], [0, 300 * us, 600 * us, 900 * us],
              [200 * us, 500 * us, 800 * us, 1100 * us]]
    ends = [[300 * us, 600 * us, 900 * us, 1200 * us]] * 3
    out = skew.case_skew(_spans(starts, ends))
    assert out["skew_us"] == pytest.approx(200)
    assert out["late_rank"] == 2 and out["late_share"] == 1.0 and out["late_gap_us"] == pytest.approx(200)
    assert skew.case_skew([[(1, 2)]])["late_rank"] is None


def test_a_neighbour_that_finishes_last_is_not_blamed():
    """Ring: rank 1 gets rank 2's (late) data last, finishes last and so *starts* last every time;
    its own gap is small, rank 2's is 200 us: rank 2 is the straggler."""
    us = 1_000
    starts = [[0, 305 * us, 615 * us], [0, 605 * us, 905 * us], [200 * us, 500 * us, 800 * us]]
    ends = [[300 * us, 610 * us, 910 * us], [600 * us, 900 * us, 1200 * us], [300 * us, 600 * us, 900 * us]]
    last_to_start = [max(range(3), key=lambda r: starts[r][i]) for i in (1, 2)]
    assert last_to_start == [1, 1]          # blaming the last starter would name rank 1
    out = skew.case_skew(_spans(starts, ends))
    assert out["late_rank"] == 2 and out["late_share"] == 1.0 and out["late_gap_us"] == pytest.approx(200)


def test_offsets_put_stamps_on_rank0_clock():
    o = ClockOffset(rank=1, host="b", offset_ns=5_000, error_ns=100)
    assert o.to_common(15_000) == 10_000


def test_late_findings_flag_a_rank_late_in_most_cases():
    rows = pd.DataFrame({
        "case_id": list("abcdef"), "status": ["ok"] * 6, "world_size": [4] * 6, "num_nodes": [2] * 6,
        "late_rank": [3, 3, 3, 3, 1, 3], "late_host": ["n1", "n1", "n1", "n1", "n0", "n1"],
        "late_share": [1.0, 0.9, 0.8, 1.0, 0.6, 0.4], "late_gap_us": [210, 205, 199, 230, 150, 220]})
    f = skew.late_findings(rows, min_share=0.5)
    flagged = set(f[f.flagged].name)
    assert flagged == {"rank 3", "host n1"}
    # the last Case's rank 3 was late in too few iterations to count
    assert f.set_index("name").loc["rank 3", "late_cases"] == 4


def test_no_straggler_no_finding():
    """Two healthy ranks: one of them is always 'most often late', by a few microseconds of noise."""
    rows = pd.DataFrame({"case_id": list("abcd"), "status": ["ok"] * 4, "world_size": [2] * 4,
                         "num_nodes": [1] * 4, "late_rank": [0, 1, 0, 0], "late_host": ["h"] * 4,
                         "late_share": [0.6, 0.55, 0.7, 0.5], "late_gap_us": [4.0, 6.0, 3.5, 5.0]})
    f = skew.late_findings(rows)
    assert f.empty or not f.flagged.any()


def test_an_injected_delay_in_the_python_events_loop_is_the_delayed_ranks_own_gap():
    """The first event is recorded before the first call enters its injected delay: the timeline's
    anchor is that entry, not the delayed enqueue (else every estimated end carries the delay and
    the straggler's own gap reads 0)."""
    from commbench.profile.skew import Arrivals, case_skew

    ms = 1_000_000
    slow, fast = Arrivals(1), Arrivals(0)
    slow.entered, slow.before = [0, 60 * ms, 120 * ms], [60 * ms, 120 * ms, 180 * ms]
    fast.entered, fast.before = [0, 10, 20], [1, 11, 21]
    samples = [61_000.0, 60_000.0, 60_000.0]   # each op ends 1 ms after the slow rank enqueued it
    spans = [fast.timeline("events", samples)[0], slow.timeline("events", samples)[0]]
    result = case_skew(spans)
    assert result["late_rank"] == 1 and result["late_share"] == 1.0
    assert 58_000 < result["late_gap_us"] < 60_000
