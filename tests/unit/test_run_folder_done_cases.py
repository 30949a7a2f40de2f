"""Which Cases a --resume measures again (RunFolder.done_case_ids), without a launch: a timeout or
a failure is measured again, ok, wrong and skipped are final, and a later row supersedes an earlier
one. The same through real runs: tests/unit/test_cpu_runs.py (marked mpi)."""
from __future__ import annotations

from commbench.runfolder import RunFolder


def _store(folder: RunFolder, case_id: str, status: str) -> None:
    if status == "ok":
        folder.append_samples([{"case_id": case_id, "rank": 0, "host": "h", "gpu": "cpu", "iteration": i,
                                "time_us": 1.0} for i in range(2)])
    folder.append_row({"case_id": case_id, "status": status, "time_us": 1.0, "wrong": 0})


def test_only_ok_wrong_and_skipped_rows_are_done(tmp_path):
    f = RunFolder(tmp_path)
    f.create(resume=False)
    for cid, status in [("a", "ok"), ("b", "timeout"), ("c", "failed"), ("d", "wrong"), ("e", "skipped")]:
        _store(f, cid, status)
    f.release()
    assert RunFolder(tmp_path).done_case_ids() == {"a", "d", "e"}


def test_a_later_ok_row_supersedes_the_timeout_and_the_case_is_done(tmp_path):
    f = RunFolder(tmp_path)
    f.create(resume=False)
    _store(f, "a", "timeout")
    _store(f, "b", "ok")
    f.release()
    resumed = RunFolder(tmp_path)
    resumed.create(resume=True)
    assert resumed.done_case_ids() == {"b"}
    _store(resumed, "a", "ok")
    assert resumed.done_case_ids() == {"a", "b"} and resumed.latest_row("a")["status"] == "ok"
    assert [r["status"] for r in resumed.rows() if r["case_id"] == "a"] == ["timeout", "ok"]
    resumed.release()
