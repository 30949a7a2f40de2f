"""`commbench trace` on NCCL records: a run folder holding the plugin's output for a Case (made by
driving the plugin with the harness, as NCCL would) becomes a valid Chrome trace with host API
calls and enqueues, kernels per channel and proxy steps, all on rank 0's clock."""
import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.analysis.report.sections.timelines import iteration_figure
from commbench.profile import chrome_trace, nccl_records, plugin_build
from commbench.runfolder import timeline_files as store
from commbench.runfolder.schema import COLUMNS
from tests.unit.trace_format import validate_chrome_trace

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "tests" / "unit" / "native" / "profiler_harness.cc"
pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on this machine")


@pytest.fixture(scope="module")
def nccl_run(tmp_path_factory):
    """A run folder whose Case 'warmup' ran on rank 1 (the harness' communicator rank)."""
    tmp = tmp_path_factory.mktemp("tr")
    mp = pytest.MonkeyPatch()
    mp.setenv("COMMBENCH_JIT_CACHE", str(tmp / "jit"))
    lib = plugin_build.build()
    mp.undo()
    exe = tmp / "harness"
    subprocess.run(["g++", "-std=c++17", f"-I{plugin_build.source_dir()}", str(HARNESS), "-o", str(exe), "-ldl",
                    "-lpthread"], check=True)
    run = tmp / "run"
    folder = run / "traces" / "nccl"
    folder.mkdir(parents=True)
    subprocess.run([str(exe), str(lib)], check=True, capture_output=True,
                   env={"COMMBENCH_NCCL_PROFILE_DIR": str(folder), "PATH": "/usr/bin:/bin"})
    path = next(folder.glob("*.jsonl"))
    init = nccl_records.read_lines(path)[0]
    lines = nccl_records.read_lines(path)
    # the harness' GPU stamps are made up (a few ms apart), so the origin sits well before them
    begin = next(d["t_ns"] for d in lines if d.get("label") == "begin warmup") - 10**9
    store.append_case_line(run, {"case_id": "warmup", "profiled": "nccl", "t0_ns": begin,
                                 "ranks": [{"rank": 1, "host": init["host"], "pid": init["pid"], "offset_ns": 0,
                                            "clock_error_ns": 0, "source": "nccl-kernel"}]})
    kernels = [e for e in chrome_trace.case_trace(run, "warmup")["traceEvents"] if e.get("cat") == "kernel"]
    store.append_timeline(run, [{"case_id": "warmup", "rank": 1, "host": init["host"], "iteration": 0,
                                 "start_us": min(e["ts"] for e in kernels),
                                 "end_us": max(e["ts"] + e["dur"] for e in kernels), "source": "nccl-kernel"}])
    row = {c: "" for c in COLUMNS}   # a full row of the results contract (docs/results.md)
    row.update(suite="t", bench="b", case_id="warmup", family="collectives", op="all_reduce", backend="nccl",
               variant="default", dtype="float32", size_bytes=1024, count=256, world_size=4, num_nodes=1,
               ranks_per_node=4, warmup=1, iters=1, timing="events", time_us=1.0, wrong=0, status="ok")
    pd.DataFrame([row]).to_csv(run / "results.csv", index=False)
    return run


def test_nccl_case_becomes_a_valid_chrome_trace(nccl_run):
    doc = chrome_trace.case_trace(nccl_run, "warmup")
    assert validate_chrome_trace(doc) == []
    cats = {e.get("cat") for e in doc["traceEvents"]}
    assert {"iteration", "enqueue", "kernel", "proxy", "proxy step"} <= cats
    threads = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"iterations", "host API calls", "host enqueue", "kernel ch 0", "kernel ch 1",
            "proxy ch 0 send peer 2", "proxy ch 0 recv peer 0"} <= threads
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("AllReduce #7")]
    # the GPU's own durations survive the move to the host clock
    assert sorted(e["dur"] for e in kernels) == pytest.approx([249.0, 250.0], abs=0.01)
    steps = [e for e in doc["traceEvents"] if e.get("cat") == "proxy step" and e["ph"] == "b"]
    assert len(steps) == 8
    # everything lies on one timeline near the Case's origin (host stamps and converted GPU stamps)
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert min(e["ts"] for e in spans) >= 0 and max(e["ts"] for e in spans) < 60e6


def test_trace_command_writes_it_and_the_report_picture_shows_kernels(nccl_run):
    out = nccl_run / "one.json"
    res = CliRunner().invoke(cli, ["trace", str(nccl_run), "--case", "warmup", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert validate_chrome_trace(json.loads(out.read_text())) == []
    fig = iteration_figure(nccl_run, "warmup")
    assert fig is not None and "NCCL kernel channels" in fig.axes[0].get_title()


def test_trace_of_an_unknown_case_is_a_clear_error(nccl_run):
    res = CliRunner().invoke(cli, ["trace", str(nccl_run), "--case", "nope"])
    assert res.exit_code == 2 and "no per-rank data for Case nope" in res.output
    res = CliRunner().invoke(cli, ["trace", str(nccl_run / "missing")])
    assert res.exit_code == 2 and "not a run folder" in res.output


def test_the_validator_catches_broken_traces():
    good = {"traceEvents": [{"ph": "X", "name": "a", "pid": 0, "tid": 0, "ts": 0, "dur": 10},
                            {"ph": "X", "name": "b", "pid": 0, "tid": 0, "ts": 2, "dur": 3}]}
    assert validate_chrome_trace(good) == []
    overlap = {"traceEvents": good["traceEvents"] + [{"ph": "X", "name": "c", "pid": 0, "tid": 0, "ts": 8,
                                                      "dur": 5}]}
    assert any("partly overlaps" in e for e in validate_chrome_trace(overlap))
    assert validate_chrome_trace({"traceEvents": [{"ph": "X", "name": "a", "pid": 0, "tid": 0, "ts": -1,
                                                   "dur": 1}]})
    assert validate_chrome_trace({"traceEvents": [{"ph": "b", "name": "s", "pid": 0, "tid": 0, "ts": 1,
                                                   "id": "x", "cat": "c"}]})


def test_a_cut_timeline_line_is_dropped_before_the_next_append(tmp_path):
    """A full disk cut timeline.csv mid-line; the next append must not glue onto it."""
    from commbench.runfolder import timeline_files as store

    row = {"case_id": "a", "rank": 0, "host": "h", "iteration": 0, "start_us": 0.0, "end_us": 1.0,
           "source": "host", "kernel_us": ""}
    store.append_timeline(tmp_path, [row])
    with open(tmp_path / "timeline.csv", "a") as fh:
        fh.write("a,1,h,1,2.0")   # cut
    store.append_timeline(tmp_path, [{**row, "case_id": "b"}])
    df = store.load_timeline(tmp_path)
    assert list(df.case_id) == ["a", "b"] and len(df.columns) == len(store.TIMELINE_COLUMNS)


def _timeline_row(case_id, rank=0):
    return {"case_id": case_id, "rank": rank, "host": "h", "iteration": 0, "start_us": 0.0, "end_us": 1.0,
            "source": "host", "kernel_us": ""}


def test_wave_appenders_to_a_new_timeline_take_turns_and_write_one_header(tmp_path):
    """The launches of a wave append to one folder at once: while another appender holds the
    folder's writers lock, an append waits (it would otherwise see an empty file and write a second
    header into the middle of it)."""
    import fcntl
    import os
    import threading

    (tmp_path / "logs").mkdir()
    held = os.open(tmp_path / "logs", os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)
    t = threading.Thread(target=store.append_timeline, args=(tmp_path, [_timeline_row("b")]),
                         kwargs={"shared": True})
    t.start()
    t.join(0.5)
    assert t.is_alive() and not (tmp_path / "timeline.csv").exists()
    store.append_timeline(tmp_path, [_timeline_row("a")], shared=False)   # the holder's own append
    os.close(held)
    t.join(10)
    assert not t.is_alive()
    text = (tmp_path / "timeline.csv").read_text()
    assert text.count("case_id,") == 1
    assert list(store.load_timeline(tmp_path).case_id) == ["a", "b"]


def test_a_repeated_header_line_is_left_out_with_a_warning(tmp_path):
    """A timeline written by appenders that raced (before they took turns) holds a copy of the
    header between rows: the rows are read, the copy is named."""
    store.append_timeline(tmp_path, [_timeline_row("a")])
    header = (tmp_path / "timeline.csv").read_bytes().splitlines(keepends=True)[0]
    assert header.endswith(b"\r\n")   # the csv module's line end, kept by the copy
    with open(tmp_path / "timeline.csv", "ab") as fh:
        fh.write(header)
    store.append_timeline(tmp_path, [_timeline_row("b", rank=1)])
    said = []
    df = store.load_timeline(tmp_path, warn=said.append)
    assert list(df.case_id) == ["a", "b"] and list(df["rank"]) == [0, 1]
    assert len(said) == 1 and "line(s) 3" in said[0]
    (tmp_path / "timeline.csv").write_bytes(header + b"a,zero,h,0,0.0,1.0,host,\n")
    with pytest.raises(Exception, match="column rank"):
        store.load_timeline(tmp_path)
