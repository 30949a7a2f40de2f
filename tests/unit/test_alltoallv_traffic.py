"""alltoallv's traffic matrices (generators, files), its buffers and check (an exchange simulated on
CPU tensors), misaligned buffers, and the collectives parameters that guard them."""
import json

import pytest

from commbench.comm import alltoallv, buffers, traffic
from commbench.families.base import Case
from commbench.families.collectives.family import FAMILY
from tests.conftest import needs_mpi

torch = pytest.importorskip("torch")


def _exchange(layouts, bufs):
    """What grouped ncclSend/ncclRecv does: each sender's block for r lands at r's block for it."""
    for r, b in enumerate(bufs):
        for src, lay in enumerate(layouts):
            c = lay.send_counts[r]
            at, frm = layouts[r].recv_displs[src], lay.send_displs[r]
            b.recv[at:at + c] = bufs[src].send[frm:frm + c]


@pytest.mark.parametrize("spec", ["uniform", "zipf:1.2", "hot_rank:2", "hot_rank:0:8"])
def test_every_sender_sends_exactly_its_size(spec):
    m = traffic.counts(spec, 4, 4096, 4)
    assert all(sum(row) == 1024 for row in m)
    assert all(c >= 0 for row in m for c in row)


def test_generators_shape_the_receivers():
    assert traffic.counts("uniform", 4, 4096, 4) == [[256] * 4] * 4
    zipf = traffic.counts("zipf:1", 4, 4096, 4)[0]
    assert zipf[0] > zipf[1] > zipf[2] > zipf[3]                # rank 0 receives most
    assert zipf[0] == pytest.approx(2 * zipf[1], abs=1)         # 1/(d+1)^s with s = 1
    hot = traffic.counts("hot_rank:1:3", 3, 3000, 4)[2]
    assert hot == [150, 450, 150]                               # rank 1 gets 3 shares of 5
    assert traffic.counts("zipf:0", 4, 4096, 4) == traffic.counts("uniform", 4, 4096, 4)


def test_algbw_counts_the_busiest_rank_larger_side():
    m = traffic.counts("hot_rank:0:8", 4, 4400, 4)   # 1100 elements per sender, 8/11 of it to rank 0
    assert m[0][0] == 800
    assert traffic.algbw_elements(m) == 4 * 800      # rank 0 receives 3200 > what anyone sends
    assert traffic.algbw_elements(traffic.counts("uniform", 4, 4096, 4)) == 1024


def test_a_file_keeps_its_shape_and_the_size_sets_the_scale(tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text("0, 100, 300\n200 0 200\n100,100,0\n")
    m = traffic.counts(str(csv), 3, 4000, 4)    # busiest sender (rows 0, 1: 400 B) sends 4000 B
    assert m == [[0, 250, 750], [500, 0, 500], [250, 250, 0]]
    js = tmp_path / "m.json"
    js.write_text(json.dumps({"bytes": [[1, 2, 9], [3, 4, 9], [9, 9, 9]]}))
    assert traffic.counts(str(js), 2, 60, 4) == [[2, 4], [6, 9]]   # the leading 2 x 2; row 1 sends 15


@pytest.mark.parametrize("text, match", [
    ("1 2\n3\n", "square"), ("1 x\n3 4\n", "not a number"), ("1 -2\n3 4\n", ">= 0"), ("0 0\n0 0\n", "no bytes")])
def test_bad_matrix_files_are_named(tmp_path, text, match):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(traffic.TrafficError, match=match):
        traffic.counts(str(f), 2, 64, 4)


def test_a_small_matrix_cannot_describe_more_ranks(tmp_path):
    f = tmp_path / "m.csv"
    f.write_text("1 2\n3 4\n")
    with pytest.raises(traffic.TrafficError, match="cannot describe 3 ranks"):
        traffic.counts(str(f), 3, 64, 4)


@pytest.mark.parametrize("spec", ["zipf", "zipf:x", "hot_rank:-1", "hot_rank:1.5", "gauss", "nofile.csv", "zipf:99"])
def test_bad_specs_are_refused_before_a_run(spec):
    assert traffic.spec_problem(spec)


def test_a_hot_rank_outside_the_world_fails_at_setup():
    with pytest.raises(traffic.TrafficError, match="not a rank of 2"):
        traffic.counts("hot_rank:3", 2, 64, 4)


@pytest.mark.parametrize("spec", ["uniform", "zipf:1.5", "hot_rank:1"])
@pytest.mark.parametrize("span, offset", [(0, 0), (1 << 16, 12)])
def test_the_exchange_checks_out_and_one_changed_element_is_wrong(spec, span, offset):
    n = 3
    m = traffic.counts(spec, n, 3000, 4)
    layouts = [traffic.Layout(m, r) for r in range(n)]
    bufs = [alltoallv.allocate(lay, r, "float32", "cpu", span, offset) for r, lay in enumerate(layouts)]
    assert all(b.recv.numel() == lay.recv_total for b, lay in zip(bufs, layouts))
    assert len({a.numel() for b in bufs for a in b.allocations}) == 1   # equal allocations on every rank
    assert all(b.send.data_ptr() - b.allocations[0].data_ptr() == offset for b in bufs)
    assert all(int(b.recv.abs().sum()) == 0 for b in bufs)              # zeroed before the exchange
    _exchange(layouts, bufs)
    assert [alltoallv.count_wrong(b, "float32") for b in bufs] == [0] * n
    bufs[1].recv[-1] += 1
    assert alltoallv.count_wrong(bufs[1], "float32") == 1
    alltoallv.refill(bufs[1], 1)
    assert alltoallv.count_wrong(bufs[1], "float32") == layouts[1].recv_total   # refilled: zeros until exchanged


def test_blocks_from_the_wrong_sender_are_caught():
    m = traffic.counts("uniform", 2, 64, 4)
    layouts = [traffic.Layout(m, r) for r in range(2)]
    bufs = [alltoallv.allocate(lay, r, "float32", "cpu") for r, lay in enumerate(layouts)]
    _exchange(layouts, bufs)
    b = bufs[0]
    b.recv[:8], b.recv[8:] = b.recv[8:].clone(), b.recv[:8].clone()   # blocks swapped
    assert alltoallv.count_wrong(b, "float32") > 0


@pytest.mark.parametrize("op, in_place", [("all_reduce", True), ("all_gather", True), ("reduce_scatter", False),
                                          ("alltoall", False)])
def test_offset_buffers_start_past_their_allocation_and_keep_the_aliasing(op, in_place):
    bufs = buffers.allocate(op, 16, 4, 1, "float32", "cpu", in_place, span_bytes=1 << 12, offset_bytes=8)
    for a in bufs.allocations:
        assert a.data_ptr() % 8 == 0
    heads = {a.data_ptr() + 8 for a in bufs.allocations}
    assert bufs.send.data_ptr() in heads or bufs.recv.data_ptr() in heads
    assert bufs.recv.data_ptr() in heads   # every output starts 8 bytes past its allocation
    if not in_place:                       # and so does a separate input
        assert bufs.send.data_ptr() in heads and bufs.send.data_ptr() != bufs.recv.data_ptr()
    assert bufs.steps > 1
    if in_place and op == "all_gather":
        assert bufs.send.data_ptr() == bufs.recv.data_ptr() + 16 * 4   # rank 1's chunk of recv
    assert buffers.count_wrong(op, "sum", bufs, 4, 1, "float32") > 0   # nothing ran yet


def _case(**kw):
    fields = dict(suite="s", bench="b", family="collectives", op="all_reduce", backend="nccl", variant="default",
                  env=(), dtype="float32", size_bytes=4096, params=(), warmup=1, iters=2, timing="events",
                  ranks=2, ranks_per_node=2, timeout_s=10.0)
    params = kw.pop("params", {})
    fields.update(kw)
    fields["params"] = tuple(params.items())
    return Case(**fields)


def test_the_collectives_refuse_what_cannot_run():
    assert FAMILY.impossible(_case(params={"offset_bytes": 4})) is None
    assert "not a multiple of the 2-byte" in FAMILY.impossible(_case(dtype="bfloat16", params={"offset_bytes": 3}))[1]
    assert FAMILY.impossible(_case(backend="gloo", params={"register": "user"}))[0] == "params.register"
    assert FAMILY.impossible(_case(op="alltoallv", backend="mpi"))[0] == "backends"
    assert "no in-place form" in FAMILY.unsupported(_case(op="alltoallv", params={"in_place": True}))
    assert "not in" in FAMILY.unsupported(_case(params={"register": "both"}))
    assert "traffic" in FAMILY.unsupported(_case(op="alltoallv", params={"traffic": "zipf"}))
    assert "not in" in FAMILY.unsupported(_case(params={"rank_time": "sum"}))


def test_alltoallv_traffic_is_the_busiest_side():
    t = FAMILY.traffic(_case(op="alltoallv", size_bytes=4400, params={"traffic": "hot_rank:0:8"}), 4)
    assert t.algbw_bytes == 4 * 800 * 4 and t.bus_factor == pytest.approx(0.75)
    u = FAMILY.traffic(_case(op="alltoallv", size_bytes=4096), 4)
    a = FAMILY.traffic(_case(op="alltoall", size_bytes=4096), 4)
    assert (u.algbw_bytes, u.bus_factor) == (a.algbw_bytes, a.bus_factor)   # uniform = alltoall's bytes


@needs_mpi
def test_rank_time_and_offsets_in_a_real_two_rank_run(tmp_path):
    """mpi, 2 ranks: misaligned buffers check out, and each row's time is the median over
    iterations of its rank_time's reduction of the ranks' samples."""
    import statistics

    from click.testing import CliRunner

    from commbench.cli import cli
    from commbench.runfolder.reader import load_run

    suite = tmp_path / "s.yaml"
    suite.write_text("name: rt\ndefaults: {ranks: 2, warmup: 1, iters: 9, timeout_s: 60, sizes: [4KiB]}\n"
                     "benchmarks:\n  - {name: b, family: collectives, backends: [mpi], ops: [all_reduce, alltoall],\n"
                     "     params: {offset_bytes: [0, 12], rank_time: [max, avg, min, rank0]}}\n")
    res = CliRunner().invoke(cli, ["run", str(suite), "--out", str(tmp_path / "run"), "--quiet"])
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "run")
    df, samples = run.results, run.samples
    assert len(df) == 16 and (df["status"] == "ok").all() and (df["wrong"] == 0).all()
    fns = {"max": max, "min": min, "avg": lambda v: sum(v) / len(v), "rank0": lambda v: v[0]}
    for _, row in df.iterrows():
        s = samples[samples["case_id"] == row["case_id"]].sort_values(["iteration", "rank"])
        per_iter = [fns[row["rank_time"]](list(g["time_us"])) for _, g in s.groupby("iteration")]
        assert row["time_us"] == pytest.approx(statistics.median(per_iter))
        assert row["time_us_p90"] <= row["time_us_p99"] <= row["time_us_max"]


def test_a_hot_rank_the_launch_does_not_have_skips_the_case():
    from types import SimpleNamespace

    from commbench.errors import SkipCase

    ctx = SimpleNamespace(world=SimpleNamespace(size=2, rank=0), device="cpu")
    with pytest.raises(SkipCase, match="traffic hot_rank:3: hot_rank 3 is not a rank of 2"):
        FAMILY.setup(_case(op="alltoallv", params={"traffic": "hot_rank:3"}), ctx)
