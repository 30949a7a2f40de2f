"""Profiling's files (timeline.csv, traces/) are written through the run folder's one opener:
no link inside the run folder is followed, whatever profile wrote."""
from __future__ import annotations

import json

import pytest

from commbench.errors import RunFolderError
from commbench.runfolder import files, timeline_files, trace_files


def _outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    return run, outside


def test_a_torch_trace_is_stored_inside_the_run_folder(tmp_path):
    run, _ = _outside(tmp_path)
    rel = trace_files.write_torch(run, "c0", 1, lambda p: open(p, "w").write('{"traceEvents": []}'))
    assert rel == "traces/torch/c0-rank1.json"
    assert json.loads((run / rel).read_text()) == {"traceEvents": []}
    assert not list((run / "traces" / "torch").glob(".*"))


@pytest.mark.parametrize("where", ["traces", "traces/torch"])
def test_a_link_in_the_torch_trace_path_is_refused(tmp_path, where):
    run, outside = _outside(tmp_path)
    (run / where).parent.mkdir(parents=True, exist_ok=True)
    (run / where).symlink_to(outside)
    with pytest.raises(files.LinkRefused):
        trace_files.write_torch(run, "c0", 0, lambda p: open(p, "w").write("{}"))
    assert list(outside.iterdir()) == []


def test_the_nccl_folder_is_made_but_never_through_a_link(tmp_path):
    run, outside = _outside(tmp_path)
    assert trace_files.nccl_dir(run) == run / "traces" / "nccl" and (run / "traces" / "nccl").is_dir()
    other = tmp_path / "other"
    other.mkdir()
    (other / "traces").symlink_to(outside)
    with pytest.raises(files.LinkRefused):
        trace_files.nccl_dir(other)
    assert list(outside.iterdir()) == []


def test_chrome_traces_lists_files_not_links(tmp_path):
    run, outside = _outside(tmp_path)
    trace_files.write_chrome(run, "c0", b"{}")
    (outside / "x.json").write_text("{}")
    (run / "traces" / "chrome" / "c9.json").symlink_to(outside / "x.json")
    assert trace_files.chrome_traces(run) == ["c0"]


@pytest.mark.parametrize("name", ["timeline.csv", "traces/cases.jsonl"])
def test_profile_appends_never_write_through_a_link(tmp_path, name):
    run, outside = _outside(tmp_path)
    victim = outside / "victim"
    victim.write_text("keep\n")
    (run / "traces").mkdir()
    (run / name).symlink_to(victim)
    with pytest.raises(RunFolderError):
        if name == "timeline.csv":
            timeline_files.append_timeline(run, [{"case_id": "c0", "rank": 0, "iteration": 0,
                                                  "start_us": 0.0, "end_us": 1.0}])
        else:
            timeline_files.append_case_line(run, {"case_id": "c0", "ranks": [{"rank": 0, "host": "h"}]})
    assert victim.read_text() == "keep\n"


def test_a_cut_last_line_is_dropped_before_the_next_append(tmp_path):
    run, _ = _outside(tmp_path)
    row = {"case_id": "c0", "rank": 0, "iteration": 0, "start_us": 0.0, "end_us": 1.0}
    timeline_files.append_timeline(run, [row])
    with open(run / "timeline.csv", "a") as fh:
        fh.write("c1,0,h,0,0.0,")   # a write cut by a crash
    timeline_files.append_timeline(run, [dict(row, case_id="c2")])
    assert list(timeline_files.load_timeline(run)["case_id"]) == ["c0", "c2"]
