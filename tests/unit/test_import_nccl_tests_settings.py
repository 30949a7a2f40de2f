"""nccl-tests' -u, -R, -a, -I tails and alltoallv_perf as imported parameters and columns, and the
bounds an import fills with --machine. Derived at run time from the real 1x H200 -J file
(tests/fixtures/nccl_tests/README.md): its command line and per-iteration block edited."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from commbench.analysis.import_nccl_tests import convert, import_files
from commbench.analysis.nccl_tests import read
from commbench.analysis.nccl_tests.machine import MachineError
from commbench.analysis.nccl_tests.records import option_value
from commbench.runfolder.reader import load_run

FX = Path(__file__).resolve().parents[1] / "fixtures"
AR_JSON = FX / "nccl_tests" / "all_reduce_perf.json"
HOST = "vm"   # the fixture's host


def _variant(tmp_path: Path, name: str, edit) -> Path:
    doc = json.loads(AR_JSON.read_text())
    edit(doc)
    out = tmp_path / name
    out.write_text(json.dumps(doc))
    return out


def _with_args(*extra):
    def edit(doc):
        doc["args"] = doc["args"][:-2] + list(extra) + doc["args"][-2:]
    return edit


@pytest.mark.parametrize("cmd, want", [
    (["x", "-R", "1"], "1"), (["x", "-R2"], "2"), (["x", "--local_register", "1"], "1"),
    (["x", "--local_register=2"], "2"), (["x", "-R", "1", "-R", "0"], "0"), (["x", "-b", "8"], None)])
def test_options_are_read_in_every_getopt_spelling(cmd, want):
    assert option_value(cmd, "R", "local_register") == want


def test_u_r_a_of_a_json_command_line_become_parameters(tmp_path):
    f = _variant(tmp_path, "ar.json", _with_args("-R", "1", "-u", "3", "-a", "3"))
    (run,) = read(f)
    assert (run.register, run.unalign, run.average) == (1, 3, 3)
    rows, *_ = convert([f])
    assert {(r["register"], r["registered"], r["offset_bytes"], r["rank_time"], r["variant"]) for r in rows} == \
        {("user", "user", 12, "max", "default")}   # -u counts float elements: 3 x 4 bytes


def test_a_json_without_options_has_nccl_tests_defaults_and_a_table_says_it_cannot_tell():
    rows, *_ = convert([AR_JSON])
    assert {(r["register"], r["registered"], r["offset_bytes"], r["rank_time"]) for r in rows} == \
        {("none", "none", 0, "avg")}
    rows, *_ = convert([FX / "nccl_tests" / "all_reduce_perf.txt"])
    assert {r["registered"] for r in rows} == {"unknown (a table does not print -R)"}
    assert {r["rank_time"] for r in rows} == {"avg"}


def test_window_registration_on_an_older_nccl_is_what_nccl_tests_falls_back_to(tmp_path):
    def edit(doc):
        _with_args("-R", "2")(doc)
        doc["nccl_version"] = 22603
    rows, *_ = convert([_variant(tmp_path, "ar.json", edit)])
    assert {(r["register"], r["registered"]) for r in rows} == {("window", "user")}


def test_a_bad_option_value_is_named(tmp_path):
    from commbench.analysis.nccl_tests import NcclTestsFormatError

    with pytest.raises(NcclTestsFormatError, match="-a"):
        read(_variant(tmp_path, "ar.json", _with_args("-a", "7")))


def _per_iter(doc, procs=None):
    """-I 1 with 100 iterations: 99 at the row's time and one 50x slower (a tail only p99 and max see)."""
    doc["config"]["per_iter_timing"] = True
    for r in doc["results"]:
        for key in ("out_of_place", "in_place"):
            t = r[key]["time"]
            times = [t] * 99 + [50 * t]
            r[f"{key}_per_iter"] = {"min_us": t, "max_us": 50 * t, "p99_us": t, "times_us": times,
                                    **({"per_process_max_times_us": procs(times)} if procs else {})}


def test_per_iteration_tails_give_p99_beside_p90_and_max(tmp_path):
    out = tmp_path / "imp"
    import_files([_variant(tmp_path, "ar.json", _per_iter)], out)
    df = load_run(out).results
    t = df["time_us"]
    assert (df["time_us_p90"] == t).all()                     # a 1% tail: p90 does not see it
    assert ((df["time_us_p99"] > df["time_us_p90"]) & (df["time_us_p99"] < df["time_us_max"])).all()
    assert (df["time_us_max"] == 50 * t).all()


def test_the_tail_is_reduced_over_processes_as_minus_a_says(tmp_path):
    def two_procs(times):
        return [times, [x / 2 for x in times]]

    def edit(doc, a):
        _per_iter(doc, two_procs)
        doc["config"]["devices"].append(dict(doc["config"]["devices"][0], rank=1, pid=2))
        _with_args("-a", a)(doc)
        for r in doc["results"]:   # two ranks: times and bandwidths stay consistent with busbw's factor
            for key in ("out_of_place", "in_place"):
                r[key]["bus_bw"] = r[key]["alg_bw"] * 2 * (2 - 1) / 2

    rows_max, *_ = convert([_variant(tmp_path, "max.json", lambda d: edit(d, "3"))])
    rows_min, *_ = convert([_variant(tmp_path, "min.json", lambda d: edit(d, "2"))])
    big = [r for r in rows_max if r["size_bytes"] == 512 << 20 and not r["in_place"]][0]
    small = [r for r in rows_min if r["size_bytes"] == 512 << 20 and not r["in_place"]][0]
    assert small["time_us_max"] == pytest.approx(big["time_us_max"] / 2)
    assert (big["rank_time"], small["rank_time"]) == ("max", "min")


def _alltoallv_doc(doc, env=(), count=None):
    """An alltoallv_perf -J file of one rank: size = the busiest side, redop none, algbw = size / time."""
    doc["args"][0] = doc["args"][0].replace("all_reduce_perf", "alltoallv_perf")
    doc["env"] = list(env)
    for r in doc["results"]:
        r["redop"] = "none"
        r["count"] = r["size"] // 4 if count is None else count
        for key in ("out_of_place", "in_place"):
            side = r[key]
            side["alg_bw"] = r["size"] / side["time"] / 1e3
            side["bus_bw"] = 0.0


def test_alltoallv_perf_imports_with_its_traffic(tmp_path):
    rows, *_ = convert([_variant(tmp_path, "a.json", _alltoallv_doc)])
    assert {r["op"] for r in rows} == {"alltoallv"} and {r["traffic"] for r in rows} == {"spread:1"}
    big = [r for r in rows if r["size_bytes"] == 512 << 20 and not r["in_place"]][0]
    assert big["algbw_gbps"] == pytest.approx((512 << 20) / big["time_us"] / 1e3)
    env = ["NCCL_TESTS_ALLTOALLV_SPREAD=0.25"]
    rows, *_ = convert([_variant(tmp_path, "b.json", lambda d: _alltoallv_doc(d, env))])
    assert {r["traffic"] for r in rows} == {"spread:0.25"}
    env = ["NCCL_TESTS_ALLTOALLV_MATRIX_FILE=/data/moe.txt"]
    rows, *_ = convert([_variant(tmp_path, "c.json", lambda d: _alltoallv_doc(d, env, count=0))])
    assert {r["traffic"] for r in rows} == {"/data/moe.txt"}
    assert {r["status"] for r in rows if r["size_bytes"] > 0} == {"ok"}   # count 0 is matrix mode, not 0 bytes


def _machine(tmp_path: Path, fixture: str, host: str = HOST) -> Path:
    doc = json.loads((FX / "links" / fixture).read_text())
    doc["hostname"] = host
    out = tmp_path / "info.json"
    out.write_text(json.dumps(doc))
    return out


def test_machine_fills_bounds_and_links(tmp_path):
    out = tmp_path / "imp"
    _, rows = import_files([AR_JSON], out, machine=_machine(tmp_path, "h200-pcie.json"))
    run = load_run(out)
    assert "links" in run.meta
    one_rank = [r for r in rows if not r["in_place"]]
    assert all(r["bound_gbps"] is None and "busbw is 0" in r["bound_reason"] for r in one_rank)
    df = run.results
    assert {"bound_gbps", "pct_of_bound"} <= set(df.columns)


def test_machine_bounds_a_copy_on_one_gpu_by_hbm(tmp_path):
    from commbench.analysis.import_nccl_tests import convert as conv

    f = FX / "nccl_tests" / "broadcast_perf.txt"
    rows, _, meta, _ = conv([f], machine=_machine(tmp_path, "h200-pcie.json", host=read(f)[0].devices[0].host))
    big = max((r for r in rows if not r["in_place"]), key=lambda r: r["size_bytes"])
    hbm = meta["links"]["gpus"][0]["hbm_gbps"]
    assert big["bound_gbps"] == pytest.approx(hbm / 2, rel=1e-3) and big["bound_link"].startswith("hbm")
    assert 0 < big["pct_of_bound"] <= 105


def test_a_machine_of_another_host_is_refused(tmp_path):
    with pytest.raises(MachineError, match="describes host other"):
        convert([AR_JSON], machine=_machine(tmp_path, "h200-pcie.json", host="other"))
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(MachineError, match="describes no links"):
        convert([AR_JSON], machine=bad)


def test_compare_shows_each_side_against_its_bound(tmp_path):
    from commbench.analysis.compare import CompareSettings, compare_runs
    from commbench.analysis.compare_summary import compare_document
    from commbench.analysis.report.markdown import render

    f = FX / "nccl_tests" / "broadcast_perf.txt"
    info = _machine(tmp_path, "h200-pcie.json", host=read(f)[0].devices[0].host)
    import_files([f], tmp_path / "a", machine=info)
    import_files([f], tmp_path / "b")   # no machine: no bound on that side
    points = compare_runs(load_run(tmp_path / "a"), load_run(tmp_path / "b"))
    big = points[(points["size_bytes"] == points["size_bytes"].max()) & ~points["in_place"].astype(bool)].iloc[0]
    assert big["bound_gbps"] > 0 and 0 < big["pct_of_bound_base"] <= 105
    assert big["pct_of_bound_new"] != big["pct_of_bound_new"]   # NaN: the new side knows no machine
    assert "pct_of_bound_base" in render(compare_document("a", "b", points, CompareSettings()))


def test_compare_does_not_pair_points_measured_differently(tmp_path):
    from commbench.analysis.compare import compare_runs

    import_files([AR_JSON], tmp_path / "plain")
    import_files([_variant(tmp_path, "r.json", _with_args("-R", "1"))], tmp_path / "reg")
    points = compare_runs(load_run(tmp_path / "plain"), load_run(tmp_path / "reg"))
    assert set(points["verdict"]) == {"new", "missing"}   # register none vs user: never one point


# ---- real nccl-tests 2.19.6 runs with these options (tests/fixtures/nccl_tests/features) ----

REAL = FX / "nccl_tests" / "features"


def test_real_register_unalign_average_and_tails():
    rows, samples, meta, _ = convert([REAL / "ar_R1_u1_a3_I1.json"])
    assert {(r["register"], r["registered"], r["offset_bytes"], r["rank_time"]) for r in rows} == \
        {("user", "user", 4, "max")}
    assert len(samples) == 4 * 40   # 2 sizes x 2 sides x 40 iterations
    doc = json.loads((REAL / "ar_R1_u1_a3_I1.json").read_text())
    for r, res in zip(rows[::2], doc["results"]):
        theirs = res["out_of_place_per_iter"]
        assert r["time_us_p90"] <= r["time_us_p99"] <= r["time_us_max"] == pytest.approx(theirs["max_us"])
        assert r["time_us_p99"] <= theirs["p99_us"]   # nccl-tests: nearest rank (its max at 40 iterations)
    settings = meta["nccl_tests"][0]["settings"]
    assert (settings["register"], settings["unalign"], settings["average"]) == (1, 1, 3)


def test_real_table_twin_reads_i_p99_and_unalign():
    rows, *_ = convert([REAL / "ar_R1_u1_a3_I1.txt"])
    assert {(r["offset_bytes"], r["rank_time"], r["registered"]) for r in rows} == \
        {(4, "avg", "unknown (a table does not print -R)")}
    oop = [r for r in rows if not r["in_place"]]
    assert [r["time_us_p99"] for r in oop] == [12.70, 29.73]   # the i_p99 column


def test_real_window_registration():
    rows, *_ = convert([REAL / "ar_R2.json"])
    assert {(r["register"], r["registered"]) for r in rows} == {("window", "window")}   # NCCL 2.28.3 >= 2.27


def test_real_alltoallv_generated_and_matrix():
    rows, *_ = convert([REAL / "a2av.json"])
    oop = [r for r in rows if not r["in_place"]]
    assert {(r["op"], r["traffic"], r["rank_time"], r["status"]) for r in oop} == \
        {("alltoallv", "spread:1", "max", "ok")}
    assert oop[-1]["algbw_gbps"] == pytest.approx(4194304 / 14.8836 / 1e3, rel=1e-5)
    assert all(r["busbw_gbps"] is None for r in oop)   # one rank: the factor (n-1)/n is 0
    assert {r["status"] for r in rows if r["in_place"]} == {"skipped"}   # nccl-tests does not check it
    rows, *_ = convert([REAL / "a2av_matrix.json"])
    oop = [r for r in rows if not r["in_place"]]
    assert [(r["traffic"], r["count"], r["size_bytes"], r["status"]) for r in oop] == \
        [("/tmp/m1.txt", 0, 2 << 20, "ok")]


def test_real_machine_bounds_a_one_gpu_broadcast_by_its_hbm(tmp_path):
    f = FX / "nccl_tests" / "broadcast_perf.txt"   # the same H200 host ("vm")
    out = tmp_path / "imp"
    _, rows = import_files([f], out, machine=REAL / "info-h200.json")
    big = max((r for r in rows if not r["in_place"]), key=lambda r: r["size_bytes"])
    assert big["bound_link"] == "hbm3e" and big["bound_gbps"] == pytest.approx(4814.3 / 2, rel=1e-3)
    assert 50 < big["pct_of_bound"] <= 105
    ar, *_ = convert([REAL / "ar_R2.json"], machine=REAL / "info-h200.json")
    assert all(r["bound_gbps"] is None and r["bound_reason"] for r in ar)   # 1-rank all_reduce: no bus


def test_bounds_written_by_an_import_are_what_reading_computes(tmp_path):
    """--machine is the one writer of bound columns (the machine is known when the rows are
    written): each row has a bound or the reason it has none, the same as computed on reading."""
    import csv

    from commbench.analysis.bounds import with_bounds

    out = tmp_path / "imp"
    import_files([FX / "nccl_tests" / "broadcast_perf.txt"], out, machine=REAL / "info-h200.json")
    written = list(csv.DictReader((out / "results.csv").open()))
    assert all(r["bound_gbps"] or r["bound_reason"] for r in written)
    run = load_run(out)
    read = with_bounds(run.results.drop(columns=["bound_gbps", "bound_link", "bound_reason", "pct_of_bound"]),
                       run.meta)
    assert [r["bound_gbps"] for r in written] == ["" if v != v else f"{v:g}" for v in read["bound_gbps"]]
    assert [r["bound_reason"] for r in written] == list(read["bound_reason"])
