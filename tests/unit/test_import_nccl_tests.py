"""`commbench import nccl-tests` on real nccl-tests 2.19.6 outputs (1x H200) and damaged copies of them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.analysis.import_nccl_tests import convert, import_files
from commbench.analysis.nccl_tests import half_unit, read
from commbench.cli import cli
from commbench.analysis.compare import compare_runs
from commbench.runfolder.reader import load_run
from commbench.suite import load_suite

FX = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_tests"
OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv")
TABLES = [FX / f"{op}_perf{g}.txt" for op in OPS for g in ("", "_G5")]


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _damaged(tmp_path: Path, src: Path, edit) -> Path:
    """A copy of a real output with ``edit(lines) -> lines`` applied."""
    lines = src.read_text().splitlines(keepends=True)
    out = tmp_path / src.name
    out.write_text("".join(edit(lines)))
    return out


def _line_of(path: Path, startswith: str) -> int:
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip().startswith(startswith):
            return i
    raise AssertionError(startswith)


# ---- parsing -------------------------------------------------------------------------------

def test_text_table_and_its_json_twin_say_the_same():
    (txt,) = read(FX / "all_reduce_perf_json_stdout.txt")
    (js,) = read(FX / "all_reduce_perf.json")
    assert txt.program == js.program == "all_reduce_perf"
    assert (txt.version, txt.nccl_headers, txt.nccl_library, js.nccl_library) == ("2.19.6", 22809, 22803, 22803)
    assert (txt.warmup_iters, txt.iters, txt.graph_launches, txt.world_size) == (5, 20, 0, 1)
    assert (js.warmup_iters, js.iters, js.graph_launches, js.world_size) == (5, 20, 0, 1)
    assert txt.devices[0].name == js.devices[0].name == "NVIDIA H200"
    sizes = [8 * 4**k for k in range(14)]
    assert [line.size_bytes for line in txt.lines] == [line.size_bytes for line in js.lines] == sizes
    for a, b in zip(txt.lines, js.lines):
        for sa, sb in zip(a.sides, b.sides):
            assert abs(sa.time_us - sb.time_us) <= 0.005 + 1e-9   # the table rounds to 2 decimals
            assert sa.wrong == sb.wrong == 0
    assert js.command[1:9] == ["-b", "8", "-e", "1G", "-f", "4", "-g", "1"]


def test_half_unit_follows_the_printed_precision():
    assert half_unit("6.42") == pytest.approx(0.005)
    assert half_unit("1169.2") == pytest.approx(0.05)
    assert half_unit("109601") == pytest.approx(0.5)
    assert half_unit("2e+06") == pytest.approx(5e5)


# ---- rows ----------------------------------------------------------------------------------

def test_rows_carry_our_columns_and_recomputed_bandwidth():
    rows, samples, meta, _ = convert([FX / "sendrecv_perf.txt"])
    assert len(rows) == 28 and samples == []
    oop = [r for r in rows if not r["in_place"]]
    assert {r["status"] for r in oop} == {"ok"}
    big = next(r for r in oop if r["size_bytes"] == 512 * 2**20)
    assert (big["family"], big["op"], big["backend"], big["dtype"], big["count"]) == \
        ("collectives", "sendrecv", "nccl", "float32", 128 * 2**20)
    assert (big["timing"], big["warmup"], big["iters"], big["world_size"], big["source"]) == \
        ("pipelined", 5, 20, 1, "nccl-tests")
    # sendrecv busbw factor 1: algbw = busbw = size / time, recomputed from the printed time
    assert big["busbw_gbps"] == pytest.approx(big["size_bytes"] / (big["time_us"] * 1e-6) / 1e9)
    assert big["source_line"] == f"sendrecv_perf.txt:{_line_of(FX / 'sendrecv_perf.txt', '536870912')}"
    # nccl-tests does not check in-place sendrecv (N/A): commbench has none -> skipped, time kept
    inp = [r for r in rows if r["in_place"]]
    assert {r["status"] for r in inp} == {"skipped"} and all(r["time_us"] > 0 for r in inp)
    assert all(r["wrong"] is None for r in inp)


def test_graph_runs_are_timing_graph_and_unchecked_runs_fail():
    rows, *_ = convert([FX / "all_reduce_perf_G5.txt"])
    assert {r["timing"] for r in rows} == {"graph"}
    rows, *_ = convert([FX / "ar_check0.txt"])
    assert {r["status"] for r in rows} == {"failed"}
    assert "-c 0" in rows[0]["reason"] and rows[0]["time_us"] > 0


def test_zero_element_rows_are_skipped_with_the_16_byte_rule():
    rows, *_ = convert([FX / "all_gather_perf.txt"])
    zero = [r for r in rows if r["size_bytes"] == 0]
    assert len(zero) == 2 and {r["status"] for r in zero} == {"skipped"}
    assert "16 bytes" in zero[0]["reason"]


def test_case_ids_line_up_with_a_suite_of_the_same_points(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "name: parity\nbenchmarks:\n"
        "  - name: nccl-tests\n    family: collectives\n    backends: [nccl]\n"
        "    ops: [all_reduce, reduce_scatter]\n    dtypes: [float32]\n    sizes: [2MiB, 512MiB]\n"
        "    params: {in_place: [false, true], rank_time: avg}\n    ranks: 1\n    warmup: 5\n    iters: 20\n"
        "    timing: graph\n")   # rank_time avg: nccl-tests' -a default, which a table import assumes
    ours = {c.case_id for c in load_suite(suite).cases}
    rows, *_ = convert([FX / "all_reduce_perf_G5.txt", FX / "reduce_scatter_perf_G5.txt"])
    theirs = {r["case_id"] for r in rows if r["size_bytes"] in (2 * 2**20, 512 * 2**20)}
    assert len(ours) == 8 and ours == theirs


def test_run_json_says_what_the_files_say(tmp_path):
    out = tmp_path / "imp"
    import_files([FX / "all_reduce_perf.json", FX / "all_gather_perf_G5.txt"], out)
    meta = json.loads((out / "run.json").read_text())
    assert (meta["source"], meta["nccl"], meta["nccl_tests_version"]) == ("nccl-tests", "2.28.3", "2.19.6")
    assert meta["hosts"] == ["vm"] and meta["gpus"] == ["NVIDIA H200"]
    assert "all_reduce_perf -b 8 -e 1G -f 4 -g 1 -w 5 -n 20" in meta["command"]
    assert meta["env"]["NCCL_NVLS_ENABLE"] == "0" and "LANG" not in meta["env"]
    assert [d["op"] for d in meta["nccl_tests"]] == ["all_reduce", "all_gather"]
    assert meta["nccl_tests"][1]["avg_busbw_gbps"] == 0.0 and meta["nccl_tests"][1]["settings"]["graph_launches"] == 5
    kept = json.loads((out / "logs" / "all_reduce_perf.json").read_text())
    assert not any(e.startswith("LANG=") for e in kept["env"])   # the environment is filtered there too
    assert (out / "logs" / "all_gather_perf_G5.txt").read_bytes() == (FX / "all_gather_perf_G5.txt").read_bytes()


def test_json_per_iteration_times_become_samples(tmp_path):
    # Derived from the real -J file: a -I run adds per-iteration times to each side.
    doc = json.loads((FX / "all_reduce_perf.json").read_text())
    doc["config"]["per_iter_timing"] = "true"
    for r in doc["results"]:
        t = r["out_of_place"]["time"]
        r["out_of_place_per_iter"] = {"skipped_iterations": 0, "min_us": t * 0.9, "max_us": t * 1.5,
                                      "times_us": [t * (0.9 + 0.03 * i) for i in range(20)]}
    src = tmp_path / "all_reduce_perf.json"
    src.write_text(json.dumps(doc))
    rows, samples, *_ = convert([src])
    assert len(samples) == 14 * 20
    row = next(r for r in rows if not r["in_place"] and r["size_bytes"] == 8)
    assert row["time_us_min"] == pytest.approx(row["time_us"] * 0.9)
    assert row["time_us_max"] == pytest.approx(row["time_us"] * 1.47)


def test_per_iteration_and_timestamp_columns_in_tables(tmp_path):
    # Derived from the real table: -I adds i_min i_max i_p99 i_cv% after each side, -S a timestamp.
    def edit(lines):
        out = []
        for line in lines:
            tok = line.split()
            if line.startswith("#") and tok[1:4] == ["size", "count", "type"]:
                out.append(line.rstrip() + "  i_min  i_max  i_p99  i_cv%  timestamp\n")
            elif tok and tok[0].isdigit() and len(tok) == 13:
                t_out, t_in = float(tok[5]), float(tok[9])
                extra = lambda t: [f"{t * 0.9:.2f}", f"{t * 1.2:.2f}", f"{t * 1.1:.2f}", "3.00"]  # noqa: E731
                out.append("  ".join(tok[:9] + extra(t_out) + tok[9:] + extra(t_in)
                                     + ["2026-12-01", "08:15:14"]) + "\n")
            else:
                out.append(line)
        return out
    src = _damaged(tmp_path, FX / "all_reduce_perf.txt", edit)
    rows, *_ = convert([src])
    row = next(r for r in rows if r["size_bytes"] == 512 * 2**20 and not r["in_place"])
    assert row["time_us"] == 257.55 and row["time_us_min"] == pytest.approx(231.8, abs=0.01)
    assert row["time_us_max"] == pytest.approx(309.06, abs=0.01) and row["status"] == "ok"


# ---- bad input: file:line, exit 2, nothing left behind ------------------------------------

def _import_fails(tmp_path, files, *expect):
    out = tmp_path / "out"
    res = _cli("import", "nccl-tests", *files, "--out", out)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    for text in expect:
        assert text in res.output, res.output
    assert not out.exists() and not list(tmp_path.glob(".out.*"))
    return res.output


def _with_token(line: str, index: int, value: str) -> str:
    tok = line.split()
    tok[index] = value
    return "  ".join(tok) + "\n"


def test_bandwidth_that_disagrees_with_the_formula_names_the_line(tmp_path):
    n = _line_of(FX / "sendrecv_perf.txt", "2097152")
    busbw = float((FX / "sendrecv_perf.txt").read_text().splitlines()[n - 1].split()[7])
    bad = _damaged(tmp_path, FX / "sendrecv_perf.txt", lambda ls: [
        _with_token(ln, 7, f"{busbw * 1.02:.2f}") if i == n - 1 else ln for i, ln in enumerate(ls)])
    _import_fails(tmp_path, [bad], f"sendrecv_perf.txt:{n}:", "out-of-place busbw")


def test_recompute_catches_a_wrong_world_size(tmp_path):
    # Claim a second rank: all_reduce's printed busbw (0.00 on one rank) no longer fits the formula.
    rank0 = "#  Rank  0 Group  0 Pid   1207 on         vm device  0 [0000:00:06] NVIDIA H200\n"
    rank1 = rank0.replace("Rank  0", "Rank  1").replace("device  0", "device  1")
    bad = _damaged(tmp_path, FX / "all_reduce_perf.txt",
                   lambda ls: [x for ln in ls for x in ([ln, rank1] if ln == rank0 else [ln])])
    assert "Rank  1" in bad.read_text()
    _import_fails(tmp_path, [bad], "all_reduce_perf.txt:", "busbw", "2 rank(s)")


@pytest.mark.parametrize("keep", [12, 20])
def test_truncated_table_names_its_last_line(tmp_path, keep):
    bad = _damaged(tmp_path, FX / "all_reduce_perf.txt", lambda ls: ls[:keep])
    _import_fails(tmp_path, [bad], f"all_reduce_perf.txt:{keep}:", "footer")


def test_row_cut_mid_line_names_it(tmp_path):
    n = _line_of(FX / "all_reduce_perf.txt", "8388608")
    bad = _damaged(tmp_path, FX / "all_reduce_perf.txt", lambda ls: ls[:n - 1] + [ls[n - 1][:60]])
    _import_fails(tmp_path, [bad], f"all_reduce_perf.txt:{n}:", "fields")


def test_corrupted_row_and_header_lines(tmp_path):
    n = _line_of(FX / "broadcast_perf.txt", "8192")
    bad = _damaged(tmp_path, FX / "broadcast_perf.txt",
                   lambda ls: [ln.replace("8192", "8x92", 1) if i == n - 1 else ln for i, ln in enumerate(ls)])
    _import_fails(tmp_path, [bad], f"broadcast_perf.txt:{n}:", "neither a result row")
    bad = _damaged(tmp_path, FX / "broadcast_perf.txt", lambda ls: [ln for ln in ls if "Rank" not in ln])
    _import_fails(tmp_path, [bad], "broadcast_perf.txt:1:", "Rank")
    bad = _damaged(tmp_path, FX / "broadcast_perf.txt",
                   lambda ls: [ln.replace("time   algbw", "cputime  algbw") for ln in ls])
    _import_fails(tmp_path, [bad], "broadcast_perf.txt:", "-C")
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    _import_fails(tmp_path, [bad], "notes.txt", "no nccl-tests output")
    _import_fails(tmp_path, [tmp_path / "missing.txt"], "missing.txt", "cannot read")


def test_truncated_and_unfinished_json(tmp_path):
    text = (FX / "all_reduce_perf.json").read_text()
    cut = tmp_path / "all_reduce_perf.json"
    cut.write_text(text[: len(text) // 2])
    _import_fails(tmp_path, [cut], "all_reduce_perf.json:1:", "not valid JSON")
    doc = json.loads(text)
    del doc["average_bus_bandwidth"]
    doc["errors"] = ["NCCL failure: unhandled cuda error"]
    cut.write_text(json.dumps(doc))
    _import_fails(tmp_path, [cut], "all_reduce_perf.json", "did not finish", "unhandled cuda error")
    doc = json.loads(text)
    del doc["results"][3]["out_of_place"]["time"]
    cut.write_text(json.dumps(doc))
    _import_fails(tmp_path, [cut], "results[3].out_of_place.time: missing")


def test_a_run_that_failed_midway_says_so(tmp_path):
    fail = "vm: Test NCCL failure all_reduce.cu:54 'unhandled cuda error (run with NCCL_DEBUG=INFO for details)'\n"
    bad = _damaged(tmp_path, FX / "all_reduce_perf.txt",
                   lambda ls: ls[:16] + [fail, " .. vm pid 1207: Test failure common.cu:1093\n"])
    _import_fails(tmp_path, [bad], "all_reduce_perf.txt:17:", "nccl-tests failed here", "unhandled cuda error")


def test_one_bad_file_among_good_ones_writes_nothing(tmp_path):
    bad = _damaged(tmp_path, FX / "reduce_perf.txt", lambda ls: ls[:15])
    _import_fails(tmp_path, [FX / "all_reduce_perf.txt", bad], "reduce_perf.txt:15:")


def test_a_run_imported_twice_is_refused(tmp_path):
    _import_fails(tmp_path, [FX / "all_reduce_perf.json", FX / "all_reduce_perf_json_stdout.txt"],
                  "repeats the point of all_reduce_perf.json")


def test_out_folder_is_never_overwritten(tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "results.csv").write_text("x\n")
    res = _cli("import", "nccl-tests", FX / "all_reduce_perf.txt", "--out", out)
    assert res.exit_code == 2 and "already exists" in res.output
    assert (out / "results.csv").read_text() == "x\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _cli("import", "nccl-tests", FX / "all_reduce_perf.txt", "--out", empty)
    assert res.exit_code == 0, res.output
    assert (empty / "results.csv").is_file() and (empty / "run.json").is_file()


# ---- report, compare, accept on imported runs ---------------------------------------------

@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imp") / "nccl-tests-h200"
    res = _cli("import", "nccl-tests", *TABLES, "--out", out)
    assert res.exit_code == 0, res.output
    assert "imported 392 rows" in res.output
    return out


def test_compare_against_itself_pairs_every_point_and_finds_nothing_worse(imported):
    run = load_run(imported)
    pts = compare_runs(run, run)
    assert len(pts) == 392 and not pts["why"].str.startswith("only in").any()
    assert (pts["verdict"] == "worse").sum() == 0
    ok = pts[pts["verdict"].isin(["better", "worse", "unchanged"])]
    assert len(ok) == 326 and (ok["time_ratio"] == 1.0).all()
    assert set(pts["verdict"]) == {"unchanged", "skipped"}      # skipped in both: not a failure
    res = _cli("compare", imported, imported, "--fail-above", "1")
    assert res.exit_code == 0, res.output


def test_compare_pairs_by_timing_when_a_run_holds_both(imported, tmp_path):
    # A run with only the default loop against the mixed run: its pipelined rows pair with the
    # mixed run's pipelined rows, not with the -G ones.
    plain = tmp_path / "plain"
    import_files([FX / "all_reduce_perf.txt"], plain)
    pts = compare_runs(load_run(plain), load_run(imported))
    both = pts[~pts["why"].str.startswith("only in")]
    assert len(both) == 28 and set(both["timing"]) == {"pipelined"} and set(both["verdict"]) == {"unchanged"}
    # Two single-mode runs pair -G against the default loop: graphs remove the launch gaps.
    graph = tmp_path / "graph"
    import_files([FX / "all_reduce_perf_G5.txt"], graph)
    pts = compare_runs(load_run(plain), load_run(graph))
    small = pts[(pts["size_bytes"] <= 2048) & (pts["in_place"] == False)]  # noqa: E712
    # faster, but two runs without samples cannot say by how much noise: can't tell
    assert len(small) == 5 and set(small["verdict"]) == {"can't tell"} and (small["time_ratio"] < 0.95).all()


def test_report_builds_on_an_imported_run(imported, tmp_path):
    res = _cli("report", imported, "--out", tmp_path / "r.html")
    assert res.exit_code == 0, res.output
    md = (tmp_path / "r.md").read_text()
    assert "sendrecv" in md and "nccl-tests" in md and "graph" in md


def test_accept_judges_an_imported_run(imported, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "rules:\n"
        "  - name: ar-512mib-time\n"
        "    select: {op: all_reduce, in_place: false, timing: pipelined, size_bytes: {min: 512MiB}}\n"
        "    metric: time_us\n    op: '<='\n    value: 300\n"
        "  - name: sendrecv-busbw\n"
        "    select: {op: sendrecv, size_bytes: {min: 128MiB}}\n"
        "    metric: busbw_gbps\n    op: '>='\n    value: VALUE\n")
    rules.write_text(rules.read_text().replace("VALUE", "1000"))
    ok = _cli("accept", imported, "--rules", rules, "--out", tmp_path / "a.html")
    assert ok.exit_code == 0, ok.output
    rules.write_text(rules.read_text().replace("value: 1000", "value: 5000"))
    bad = _cli("accept", imported, "--rules", rules, "--out", tmp_path / "b.html")
    assert bad.exit_code == 1 and "sendrecv-busbw" in bad.output
    # an unchecked run (-c 0) fails acceptance on its own
    unchecked = tmp_path / "unchecked"
    import_files([FX / "ar_check0.txt"], unchecked)
    res = _cli("accept", unchecked, "--rules", rules, "--out", tmp_path / "c.html")
    assert res.exit_code == 1


def test_help_lists_the_import_command():
    res = _cli("import", "--help")
    assert res.exit_code == 0 and "nccl-tests" in res.output


@pytest.mark.parametrize("op,root,variant", [("gather", 0, "default"), ("gather", 1, "root=1"),
                                             ("scatter", 2, "root=2"), ("broadcast", 1, "root=1"),
                                             ("all_gather", 1, "default")])
def test_a_rooted_op_at_another_root_is_a_variant(op, root, variant):
    """commbench's rooted ops (ops.OPS rooted) use root 0; nccl-tests sweeps the root."""
    from types import SimpleNamespace

    from commbench.analysis.import_nccl_tests import variant_of

    run = SimpleNamespace(agg_iters=1, blocking=False, unalign=0)
    assert variant_of(run, op, SimpleNamespace(root=root)) == variant
