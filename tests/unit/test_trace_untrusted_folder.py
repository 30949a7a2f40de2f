"""`commbench trace` trusts nothing in the run folder: case ids are checked before they name a
file, links are replaced and never followed, damaged or incomplete per-rank data and a full or
read-only disk end with the file named and a non-zero exit, never a cut or partial trace
(issue 31 item 3)."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.profile import chrome_trace
from commbench.runfolder import timeline_files as store
from commbench.runfolder.schema import COLUMNS


def _run(tmp_path: Path, case_id: str = "c0", ranks=(0, 1), timeline_ranks=(0, 1)) -> Path:
    """A run folder with one two-rank Case of per-iteration timings (no NCCL records)."""
    run = tmp_path / "run"
    run.mkdir()
    row = {c: "" for c in COLUMNS}
    row.update(suite="t", bench="b", case_id="c0", family="collectives", op="all_reduce", backend="mpi",
               variant="default", dtype="float32", size_bytes=1024, count=256, world_size=2, num_nodes=1,
               ranks_per_node=2, warmup=1, iters=2, timing="events", time_us=1.0, wrong=0, status="ok")
    pd.DataFrame([row]).to_csv(run / "results.csv", index=False)
    store.append_case_line(run, {"case_id": case_id, "profiled": "", "t0_ns": 0,
                                 "ranks": [{"rank": r, "host": "h", "pid": 100 + r, "offset_ns": 0,
                                            "clock_error_ns": 0} for r in ranks]})
    store.append_timeline(run, [{"case_id": case_id, "rank": r, "host": "h", "iteration": i,
                                 "start_us": 10.0 * i + r, "end_us": 10.0 * i + 5 + r, "source": "host",
                                 "kernel_us": ""} for r in timeline_ranks for i in range(2)])
    return run


def _trace(*args) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["trace", *map(str, args)])
    assert "Traceback" not in res.output and "this is a bug" not in res.output, res.output
    return res.exit_code, res.output


def _no_files_left(run: Path) -> None:
    chrome = run / "traces" / "chrome"
    left = list(chrome.iterdir()) if chrome.is_dir() else []
    assert left == [], left


def test_a_good_case_is_traced(tmp_path):
    run = _run(tmp_path)
    code, out = _trace(run)
    assert code == 0, out
    doc = json.loads((run / "traces" / "chrome" / "c0.json").read_text())
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == 4


def test_a_case_id_from_the_folder_never_leaves_it(tmp_path):
    run = _run(tmp_path, case_id="../../../escape")
    code, out = _trace(run)
    assert code == 2 and "cases.jsonl:1" in out and "case_id" in out, out
    assert not list(tmp_path.rglob("escape*"))
    for bad in ("a/b", "x\0y", "..", ".hidden", "z" * 300, ""):
        assert store.case_id_problem(bad), bad
    assert store.case_id_problem("3f2a9c01b7de") is None
    (tmp_path / "2").mkdir()
    code, out = _trace(_run(tmp_path / "2"), "--case", "../c0")
    assert code == 2 and "not a case id" in out


def test_a_planted_link_is_replaced_not_followed(tmp_path):
    run = _run(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    chrome = run / "traces" / "chrome"
    chrome.mkdir()
    (chrome / "c0.json").symlink_to(victim)
    code, out = _trace(run)
    assert code == 0, out
    assert victim.read_text() == "keep me\n"
    assert not (chrome / "c0.json").is_symlink() and json.loads((chrome / "c0.json").read_text())


def test_the_out_file_replaces_a_link_and_a_full_disk_leaves_no_twin(tmp_path, monkeypatch):
    run = _run(tmp_path)
    victim, out_file = tmp_path / "victim.txt", tmp_path / "exported" / "t.json"
    victim.write_text("keep me\n")
    out_file.parent.mkdir()
    out_file.symlink_to(victim)
    code, out = _trace(run, "--out", out_file)
    assert code == 0, out
    assert victim.read_text() == "keep me\n" and not out_file.is_symlink()
    assert sum(e["ph"] == "X" for e in json.loads(out_file.read_text())["traceEvents"]) == 4

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(chrome_trace.os, "fsync", full)
    code, out = _trace(run, "--out", out_file)
    assert code == 1 and "t.json" in out and "full" in out, out
    assert [p.name for p in out_file.parent.iterdir()] == ["t.json"] and json.loads(out_file.read_text())


def test_a_linked_chrome_folder_is_refused(tmp_path):
    run = _run(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / "traces" / "chrome").symlink_to(outside)
    code, out = _trace(run)
    assert code == 1 and "chrome" in out and "link" in out, out
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("damage", ["binary", "not_json", "no_host"])
def test_damaged_cases_jsonl_names_the_file(tmp_path, damage):
    run = _run(tmp_path)
    path = run / "traces" / "cases.jsonl"
    line = json.loads(path.read_text())
    if damage == "binary":
        path.write_bytes(b"\x00\xff\xfe\x89PNG" * 20 + b"\n")
    elif damage == "not_json":
        path.write_text(path.read_text() + "{oops\n")
    else:
        del line["ranks"][1]["host"]
        path.write_text(json.dumps(line) + "\n")
    code, out = _trace(run)
    assert code == 2 and "cases.jsonl:" in out, out
    _no_files_left(run)


@pytest.mark.parametrize("cut", ["cases.jsonl", "timeline.csv"])
def test_a_cut_last_line_is_left_out_with_a_warning_and_the_rest_traced(tmp_path, cut):
    """A rank killed while it appended leaves a last line without its line end: `trace` names the
    file and line, leaves that line out and traces the Cases whose data are whole."""
    run = _run(tmp_path)
    # a second Case whose data the kill cut: its timeline rows, then its part line
    store.append_timeline(run, [{"case_id": "c1", "rank": r, "host": "h", "iteration": 0, "start_us": 1.0,
                                 "end_us": 2.0, "source": "host", "kernel_us": ""} for r in (0, 1)])
    if cut == "cases.jsonl":
        with open(run / "traces" / "cases.jsonl", "a") as fh:
            fh.write('{"case_id": "c1", "profiled": "", "ranks": [{"rank": 0, "ho')
    else:
        with open(run / "timeline.csv", "a") as fh:
            fh.write("c1,1,h,1,11.0,1")
    res = CliRunner().invoke(cli, ["trace", str(run)])
    assert res.exit_code == 0, res.output
    lineno = 2 if cut == "cases.jsonl" else 8
    assert res.output.count(f"warning: {run / ('traces/' if cut == 'cases.jsonl' else '') / cut}:{lineno}: "
                            "the last line has no line end") == 1, res.output
    assert (run / "traces" / "chrome" / "c0.json").exists()
    assert not (run / "traces" / "chrome" / "c1.json").exists()   # no line of its ranks: nothing to trace
    if cut == "timeline.csv":
        assert len(store.load_timeline(run)) == 6   # c0's four rows and c1's two whole ones


def test_a_missing_rank_is_an_error_not_a_partial_trace(tmp_path):
    run = _run(tmp_path, ranks=(0, 1), timeline_ranks=(0,))
    code, out = _trace(run)
    assert code == 2 and "timeline.csv" in out and "incomplete" in out, out
    _no_files_left(run)


@pytest.mark.parametrize("value", ["nan", "inf", "x", ""])
def test_a_non_number_in_timeline_csv_is_named(tmp_path, value):
    run = _run(tmp_path)
    path = run / "timeline.csv"
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace(",10.0,", f",{value},", 1) if ",10.0," in lines[2] else \
        lines[2].replace(",0.0,", f",{value},", 1)
    path.write_text("".join(lines))
    code, out = _trace(run)
    assert code == 2 and "timeline.csv:3" in out, out
    _no_files_left(run)


def test_no_bare_nan_reaches_the_json(tmp_path):
    with pytest.raises(chrome_trace.TraceDataError):
        chrome_trace._write_json(tmp_path / "x.json", {"traceEvents": [{"ts": float("nan")}]})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("err, where", [(errno.ENOSPC, "fsync"), (errno.EROFS, "replace")])
def test_a_full_or_read_only_folder_is_named_and_leaves_no_file(tmp_path, monkeypatch, err, where):
    run = _run(tmp_path)

    def fail(*a, **k):
        raise OSError(err, os.strerror(err))

    if where == "fsync":
        monkeypatch.setattr(chrome_trace.os, "fsync", fail)
    else:   # the twin is written, its rename over the trace is refused
        monkeypatch.setattr(chrome_trace.os, "replace", fail)
    code, out = _trace(run)
    assert code == 1 and "c0.json" in out and os.strerror(err) in out, out
    _no_files_left(run)


@pytest.mark.parametrize("damage", ["link", "binary"])
def test_a_planted_or_binary_nccl_record_file_is_refused(tmp_path, damage):
    run = _run(tmp_path)
    path = run / "traces" / "cases.jsonl"
    line = json.loads(path.read_text())
    line["profiled"] = "nccl"
    path.write_text(json.dumps(line) + "\n")
    folder = run / "traces" / "nccl"
    folder.mkdir()
    plugin_file = folder / "nccl-h-pid100-comm1-rank0.jsonl"
    if damage == "link":
        secret = tmp_path / "secret.txt"
        secret.write_text('{"label": "begin c0"}\n')
        plugin_file.symlink_to(secret)
    else:
        plugin_file.write_bytes(b"\xff\xfe\x00garbage\n")
    code, out = _trace(run)
    assert code == 2 and "nccl-h-pid100-comm1-rank0.jsonl" in out, out
    _no_files_left(run)
