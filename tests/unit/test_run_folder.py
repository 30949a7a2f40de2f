"""RunFolder storage: results.jsonl is the record, results.csv its latest-row-per-Case mirror."""
import csv

from commbench.results import COLUMNS, RunFolder


def row(cid, status="ok", **extra):
    return {"case_id": cid, "status": status, "time_us": 1.5, **extra}


def csv_rows(folder):
    with open(folder.path / "results.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_two_writers_in_turn_see_each_others_rows(tmp_path):
    """The parent (skipped/timeout rows) and rank 0 (measured rows) write the same folder."""
    parent, rank0 = RunFolder(tmp_path), RunFolder(tmp_path)
    parent.create(resume=False)
    parent.append_row(row("a", "skipped"))
    rank0.append_row(row("b", nccl_algo="Ring"))       # a new column: CSV rewritten
    rank0.append_row(row("c", nccl_algo="Tree"))       # appended
    parent.append_row(row("d", "timeout"))
    got = csv_rows(parent)
    assert [r["case_id"] for r in got] == ["a", "b", "c", "d"]
    assert [r["nccl_algo"] for r in got] == ["", "Ring", "Tree", ""]
    assert list(got[0]) == COLUMNS + ["nccl_algo"]


def test_a_rerun_replaces_the_case_row_in_the_csv_but_not_in_the_jsonl(tmp_path):
    f = RunFolder(tmp_path)
    f.create(resume=False)
    f.append_row(row("a", "failed"))
    f.append_row(row("b"))
    resumed = RunFolder(tmp_path)
    resumed.append_row(row("a", "ok"))
    assert [(r["case_id"], r["status"]) for r in csv_rows(f)] == [("b", "ok"), ("a", "ok")]
    assert [r["status"] for r in f.rows()] == ["failed", "ok", "ok"]
    assert {r["case_id"] for r in resumed.latest_rows()} == {"a", "b"}


def test_a_line_cut_by_a_crash_does_not_swallow_the_next_row(tmp_path):
    f = RunFolder(tmp_path)
    f.create(resume=False)
    f.append_row(row("a"))
    with open(tmp_path / "results.jsonl", "a") as fh:
        fh.write('{"case_id": "b", "sta')                # killed mid-write
    later = RunFolder(tmp_path)
    later.append_row(row("c"))
    assert [r["case_id"] for r in later.rows()] == ["a", "c"]
    assert [r["case_id"] for r in csv_rows(later)] == ["a", "c"]


def test_csv_cells_are_empty_for_none_and_kept_for_falsy_values(tmp_path):
    f = RunFolder(tmp_path)
    f.create(resume=False)
    f.append_row(row("a", wrong=0, reason=None, in_place=False))
    got = csv_rows(f)[0]
    assert (got["wrong"], got["reason"], got["in_place"]) == ("0", "", "False")
