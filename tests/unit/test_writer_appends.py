"""The run-folder writer's appends (runfolder/writer.py): samples before the row that claims them,
all or nothing: a failed append leaves no half row and no half samples, and a csv that cannot be
rewritten takes the row back."""
from __future__ import annotations

import csv
import errno

import pytest

from commbench.errors import StorageFull
from commbench.runfolder import RunFolder


def row(cid: str, status: str = "ok") -> dict:
    return {"case_id": cid, "status": status, "time_us": 1.0, "wrong": 0}


def sample(cid: str, i: int) -> dict:
    return {"case_id": cid, "rank": 0, "host": "h", "gpu": "cpu", "iteration": i, "time_us": 1.0}


def test_a_failed_append_leaves_no_half_row_and_no_half_samples(tmp_path, monkeypatch):
    f = RunFolder(tmp_path)
    f.create(resume=False)
    f.append_samples([sample("a", i) for i in range(3)])
    f.append_row(row("a"))
    sizes = {p.name: p.stat().st_size for p in tmp_path.glob("*.*")}
    from commbench.runfolder import writer

    real = writer._append

    def half_then_full(path, data):   # half the bytes land, then the disk is full
        real(path, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer, "_append", half_then_full)
    with pytest.raises(StorageFull):
        f.append_samples([sample("b", i) for i in range(3)])
    with pytest.raises(StorageFull) as info:
        f.append_row(row("b"))
    assert "--resume" in str(info.value)
    assert {p.name: p.stat().st_size for p in tmp_path.glob("*.*")} == sizes
    monkeypatch.setattr(writer, "_append", real)
    f.append_samples([sample("b", i) for i in range(3)])
    f.append_row(row("b"))
    assert [r["case_id"] for r in f.latest_rows()] == ["a", "b"]
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_csv_that_cannot_be_rewritten_takes_the_row_back(tmp_path, monkeypatch):
    """The JSONL line landed but the CSV rewrite hit a full disk: the row is undone in both."""
    f = RunFolder(tmp_path)
    f.create(resume=False)
    f.append_row(row("a"))
    from commbench.runfolder import writer

    def full(path, data):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    monkeypatch.setattr(writer, "atomic_write", full)
    with pytest.raises(StorageFull):
        f.append_row(row("a", "wrong"))       # a rerun rewrites the CSV
    assert [r["status"] for r in RunFolder(tmp_path).latest_rows()] == ["ok"]
    assert list(csv.DictReader(open(tmp_path / "results.csv")))[0]["status"] == "ok"
