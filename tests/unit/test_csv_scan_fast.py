"""scan_csv's numpy path (files without quotes, as commbench writes them) gives the csv module's
answer: the same record lines, the same refusal of a cut line, blank lines skipped."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from commbench.runfolder.check import RunFolderError, _record_lines_unquoted, scan_csv


def _csv_module(text: str) -> list[int]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header, out, start = next(reader), [], 2
    for record in reader:
        if record:
            if len(record) != len(header):
                raise RunFolderError(f"x:{start}: cut")
            out.append(start)
        start = reader.line_num + 1
    return out


@pytest.mark.parametrize("text", ["a,b\r\n1,2\r\n\r\n3,4\r\n", "a,b\r\n1,2\n,\r\n",
                                  "a,b\n1,2\n\n3,4\n", "a,b,c\n1,,\n,,\n", "a\n1\n\n\n2\n",
                                  "case_id,rank,time_us\n" + "".join(f"c{i},{i % 4},{i * 0.5}\n" for i in range(500))])
def test_the_fast_path_finds_the_same_records(text):
    fields = text.split("\n", 1)[0].count(",") + 1
    assert list(_record_lines_unquoted(Path("x"), text, fields)) == _csv_module(text)
    assert list(scan_csv(Path("x"), text, ())) == _csv_module(text)


def test_a_cut_record_is_named_with_its_line():
    with pytest.raises(RunFolderError, match=r"^x:3: 1 field\(s\) where the header has 2"):
        _record_lines_unquoted(Path("x"), "a,b\n1,2\n3\n", 2)


def test_quoted_files_take_the_csv_module():
    assert _record_lines_unquoted(Path("x"), 'a,b\n"1,5",2\n', 2) is None
    assert _record_lines_unquoted(Path("x"), "a,b\r1,2\n", 2) is None   # a lone carriage return
    assert list(scan_csv(Path("x"), 'a,b\n"1,5",2\n"x\ny",3\n', ())) == [2, 3]
