"""alltoallv's set-up on the CPU: a rank that only receives takes part, the row's size is the
busiest side on every rank, the traffic file is read once (in the guarded set-up: a vanished file
is a failed row with its reason, and the bandwidth after measuring never reads it again), and a
suite's relative traffic path is taken from the suite file's folder."""
from types import SimpleNamespace

import pytest

from commbench.comm import alltoallv, traffic
from commbench.errors import SkipCase
from commbench.families.collectives import family
from commbench.families.collectives.family import FAMILY, shape
from tests.unit.test_alltoallv_traffic import _case, _exchange

torch = pytest.importorskip("torch")


def _ctx(n, rank):
    return SimpleNamespace(world=SimpleNamespace(size=n, rank=rank), device="cpu")


def _matrix(tmp_path, text="0 300 100\n0 0 0\n200 0 0\n"):
    f = tmp_path / "m.csv"
    f.write_text(text)
    return f


def test_a_rank_that_only_receives_takes_part_and_checks_what_it_received(tmp_path):
    """Rank 1 sends nothing and receives 300 B: its set-up goes on (here to the GPU it lacks)."""
    case = _case(op="alltoallv", size_bytes=400, params={"traffic": str(_matrix(tmp_path))})
    layouts = [shape(case, 3, r)[0] for r in range(3)]
    assert (layouts[1].send_total, layouts[1].recv_total) == (0, 75)
    with pytest.raises(SkipCase, match="needs a GPU"):   # not "less than one element per rank"
        FAMILY.setup(case, _ctx(3, 1))
    bufs = [alltoallv.allocate(lay, r, "float32", "cpu") for r, lay in enumerate(layouts)]
    _exchange(layouts, bufs)
    assert [alltoallv.count_wrong(b, "float32") for b in bufs] == [0, 0, 0]
    bufs[1].recv[0] += 1
    assert alltoallv.count_wrong(bufs[1], "float32") == 1


def test_the_row_size_is_the_busiest_side_on_every_rank():
    """hot_rank:0:8 on 4 ranks: each sends 1100 elements, rank 0 receives 3200: the row says 3200."""
    case = _case(op="alltoallv", size_bytes=4400, params={"traffic": "hot_rank:0:8"})
    shapes = [shape(case, 4, r)[1:] for r in range(4)]
    assert shapes == [(3200, 3200 * 4)] * 4
    assert FAMILY.traffic(case, 4).algbw_bytes == 3200 * 4   # algbw divides the row's size_bytes
    assert shape(_case(op="alltoallv", size_bytes=4096), 4, 2)[2] == shape(_case(op="alltoall"), 4, 2)[2]   # uniform
    with pytest.raises(SkipCase, match="less than one float32 element"):
        shape(_case(op="alltoallv", size_bytes=2), 4, 0)


def test_the_traffic_file_is_read_once_in_the_guarded_set_up(tmp_path):
    from commbench.runner import _agree, _PhaseFailed

    f = _matrix(tmp_path)
    case = _case(op="alltoallv", size_bytes=400, params={"traffic": str(f)})
    shape(case, 3, 0)
    f.unlink()   # gone after the set-up: the bandwidth comes from what the set-up read
    assert FAMILY.traffic(case, 3).algbw_bytes == 400
    world = SimpleNamespace(size=1, allgather=lambda x: [x])
    with pytest.raises(_PhaseFailed) as failed:   # gone before it: a failed row that says why
        _agree(world, lambda: FAMILY.setup(case, _ctx(3, 0)))
    assert failed.value.status == "failed" and "m.csv does not exist" in failed.value.reason
    with pytest.raises(SkipCase, match="cannot describe 4 ranks"):   # too small for the launch: skipped
        shape(_case(op="alltoallv", params={"traffic": str(_matrix(tmp_path))}), 4, 0)


def test_a_relative_traffic_path_is_taken_from_the_suite_folder(tmp_path, monkeypatch):
    from commbench.suite.loader import load_suite

    folder = tmp_path / "suites"
    folder.mkdir()
    _matrix(folder)
    suite = folder / "s.yaml"
    suite.write_text("name: a2av\nbenchmarks:\n  - {name: b, family: collectives, ops: [alltoallv], ranks: 3,\n"
                     "     sizes: [4KiB], params: {traffic: [m.csv, uniform]}}\n")
    monkeypatch.chdir(tmp_path)   # not the suite's folder
    cases = load_suite(suite, gpu_count=3).cases
    assert {c.param("traffic") for c in cases} == {str(folder / "m.csv"), "uniform"}
    assert traffic.spec_problem("m.csv")   # from here, the cwd, it is not there
    monkeypatch.setattr(family, "_set_up_busiest", None)
    m = [c for c in cases if c.param("traffic") != "uniform"][0]
    assert FAMILY.traffic(m, 3).algbw_bytes == 4096
