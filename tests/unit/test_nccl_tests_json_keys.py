"""nccl-tests' -J file (analysis/nccl_tests/jsonfile.py): a key written twice in one object (two
"results" lists, two "time"s in a result) is refused naming the file, the key and, where it can
tell, the line: json.loads alone keeps the last one silently."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.analysis.nccl_tests import NcclTestsFormatError, read
from commbench.cli import cli

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "nccl_tests" / "all_reduce_perf.json"


def with_text(tmp_path, text: str) -> Path:
    path = tmp_path / "all_reduce_perf.json"
    path.write_text(text)
    return path


def test_results_twice_is_refused_with_the_line_of_the_second(tmp_path):
    text = FIXTURE.read_text()
    i = text.index('"results"')
    path = with_text(tmp_path, text[:i] + '"results": [],\n' + text[i:])
    with pytest.raises(NcclTestsFormatError) as info:
        read(path)
    second = text[:i].count("\n") + 2
    assert f"{path}:{second}: the key 'results' appears twice" in str(info.value)


def test_a_key_twice_inside_a_result_is_refused(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    text = json.dumps(doc, indent=1).replace('"time": ', '"time": 1.0, "time": ', 1)
    with pytest.raises(NcclTestsFormatError, match="the key 'time' appears twice in one JSON object"):
        read(with_text(tmp_path, text))


def test_import_of_a_file_with_a_repeated_key_is_exit_2_and_writes_nothing(tmp_path):
    text = FIXTURE.read_text()
    i = text.index('"config"')
    path = with_text(tmp_path, text[:i] + '"config": {},' + text[i:])
    out = tmp_path / "imp"
    result = CliRunner().invoke(cli, ["import", "nccl-tests", str(path), "--out", str(out)])
    assert result.exit_code == 2 and "'config' appears twice" in result.output, result.output
    assert not out.exists()


def test_the_fixture_itself_reads(tmp_path):
    assert read(with_text(tmp_path, FIXTURE.read_text()))[0].lines
