"""The one run-folder reader (runfolder/reader.py) refuses damaged files with file:line, and accept,
compare and report all go through it: a cut or short line, a missing column, a word for a number,
an unknown status, a repeated Case, bytes that are not UTF-8, a run.json that is no JSON object."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.runfolder.reader import load_run

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "tests" / "fixtures" / "runs" / "cpu-base"
RULE = "rules:\n  - {name: r, select: {op: all_reduce}, metric: busbw_gbps, op: '>=', value: 0}\n"


def damaged(tmp_path, name: str, **files) -> Path:
    run = tmp_path / name
    shutil.copytree(BASE, run)
    for fname, data in files.items():
        (run / fname.replace("_", ".", 1)).write_bytes(data if isinstance(data, bytes) else data.encode())
    return run


def csv_text() -> str:
    return (BASE / "results.csv").read_text()


def without_column(text: str, col: str) -> str:
    df = pd.read_csv(BASE / "results.csv", keep_default_na=False)
    return df.drop(columns=[col]).to_csv(index=False)


def replace_cell(col: str, value: str, row: int = 0) -> str:
    df = pd.read_csv(BASE / "results.csv", keep_default_na=False, dtype=str)
    df.loc[row, col] = value
    return df.to_csv(index=False)


CASES = {
    "cut in half": ({"results_csv": csv_text()[: len(csv_text()) // 2]}, "results.csv:", "cut"),
    "cut at a line end": ({"results_csv": "".join(csv_text().splitlines(True)[:40])[:-1]}, "cut"),
    "short line": ({"results_csv": csv_text() + "a,b,c\n"}, "results.csv:86:", "3 field(s)"),
    "no status column": ({"results_csv": without_column(csv_text(), "status")}, ":1:", "status"),
    "no wrong column": ({"results_csv": without_column(csv_text(), "wrong")}, ":1:", "wrong"),
    "wrong=many": ({"results_csv": replace_cell("wrong", "many")}, "results.csv:2:", "column wrong", "'many'"),
    "time not a number": ({"results_csv": replace_cell("time_us", "fast", 3)}, "results.csv:5:", "time_us"),
    "busbw inf": ({"results_csv": replace_cell("busbw_gbps", "inf")}, "busbw_gbps", "finite"),
    "unknown status": ({"results_csv": replace_cell("status", "great")}, "status 'great'"),
    "ok without time": ({"results_csv": replace_cell("time_us", "")}, "without time_us"),
    "repeated case": ({"results_csv": csv_text() + csv_text().splitlines(True)[1]}, "appears twice"),
    "not UTF-8": ({"results_csv": csv_text().encode()[:500] + b"\xff\xfe" + csv_text().encode()[500:]},
                  "not UTF-8"),
    "empty": ({"results_csv": ""}, "empty"),
    "jsonl holds more": ({"results_jsonl": "".join(json.dumps({"case_id": f"x{i}", "status": "ok"}) + "\n"
                                                     for i in range(3))}, "lacks 3 Case(s)", "--resume"),
    "run.json a list": ({"run_json": "[1, 2]"}, "run.json", "JSON object"),
    "run.json deep": ({"run_json": "[" * 100000 + "]" * 100000}, "run.json", "nested too deeply"),
    "samples cut": ({"samples_csv": (BASE / "samples.csv").read_text()[:700]}, "samples.csv:", "cut"),
    "samples time word": ({"samples_csv": "case_id,rank,host,gpu,iteration,time_us\nx,0,h,cpu,0,zz\n"},
                          "samples.csv:2:", "time_us"),
    "samples rank word": ({"samples_csv": "case_id,rank,host,gpu,iteration,time_us\nx,one,h,cpu,0,1.0\n"},
                          "samples.csv:2:", "rank"),
    "samples without columns": ({"samples_csv": "a,b\n1,2\n"}, "samples.csv:1:", "case_id"),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("command", ["accept", "compare", "report"])
def test_damaged_run_folders_are_refused(tmp_path, name, command):
    files, *needles = CASES[name]
    run = damaged(tmp_path, "run", **files)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULE)
    args = {"accept": ["accept", str(run), "--rules", str(rules), "--out", str(tmp_path / "a.html")],
            "compare": ["compare", str(BASE), str(run)],
            "report": ["report", str(run), "--out", str(tmp_path / "r.html")]}[command]
    result = CliRunner().invoke(cli, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    assert "commbench: error:" in result.output and len(result.output) < 2000
    assert "this is a bug in commbench" not in result.output, result.output
    for n in needles:
        assert n in result.output, result.output


def test_a_healthy_fixture_still_reads():
    run = load_run(BASE)
    assert len(run.results) == 84 and not run.samples.empty
