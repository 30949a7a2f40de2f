"""A span that ends before it starts is never drawn as 0 us: timeline.csv's reader leaves such an
iteration (and a negative kernel time) out with a warning naming the file and line, so a run's own
report still reads the folder (one GPU session met such a line in a run of 90 ok rows); a step file
with a backward step is refused naming the file."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.errors import RunFolderError
from commbench.runfolder import step_timelines
from commbench.runfolder.timeline_files import TIMELINE_COLUMNS, load_timeline

ROOT = Path(__file__).resolve().parents[2]
HEADER = ",".join(TIMELINE_COLUMNS)


def timeline(tmp_path, *rows: str) -> Path:
    (tmp_path / "timeline.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    return tmp_path


def test_well_formed_spans_read(tmp_path):
    df = load_timeline(timeline(tmp_path, "c1,0,h,0,0.0,5.0,host,", "c1,1,h,0,0.5,5.0,host,2.0"))
    assert list(df["end_us"]) == [5.0, 5.0]


def test_a_span_that_ends_before_it_starts_is_left_out_with_its_line(tmp_path):
    folder = timeline(tmp_path, "c1,0,h,0,0.0,5.0,host,", "c1,1,h,0,9.0,4.0,host,")
    said = []
    df = load_timeline(folder, said.append)
    assert list(df["rank"]) == [0]
    assert len(said) == 1 and re.search(r"timeline\.csv:3: end_us 4 is before start_us 9; 1 such span", said[0])


def test_a_negative_kernel_time_is_left_out_with_a_warning(tmp_path):
    folder = timeline(tmp_path, "c1,0,h,0,0.0,5.0,nccl,-1.5", "c1,1,h,0,0.0,5.0,nccl,2.0")
    said = []
    df = load_timeline(folder, said.append)
    assert df["kernel_us"].isna().tolist() == [True, False] and "kernel_us -1.5 is negative" in said[0]


def test_a_step_that_ends_before_it_starts_is_refused(tmp_path):
    rel = step_timelines.rel("c1", 0)
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text(json.dumps({"case_id": "c1", "rank": 0, "source": "host",
                                            "steps": [[0.0, 10.0], [20.0, 15.0]], "intervals": []}))
    with pytest.raises(RunFolderError, match="step 1 ends .15 us. before it starts .20 us."):
        step_timelines.read(tmp_path, "c1", 0)


def test_report_of_a_folder_with_a_backward_span_still_reads_it(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "cpu-base", run)
    case_id = json.loads((run / "results.jsonl").read_text().splitlines()[0])["case_id"] \
        if (run / "results.jsonl").exists() else "c1"
    timeline(run, f"{case_id},0,h,0,0.0,5.0,host,", f"{case_id},1,h,0,9.0,4.0,host,")
    result = CliRunner().invoke(cli, ["report", str(run)])
    assert result.exit_code == 0 and (run / "report.html").exists(), result.output   # the folder still reads
