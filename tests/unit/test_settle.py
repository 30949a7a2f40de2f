"""settle(): what an attempt of a launch becomes, every branch, without MPI or a folder."""
from __future__ import annotations

from commbench.launch.settle import WAVE_LIMIT_REASON, Attempt, settle

PENDING = ("a", "b", "c")
TIMEOUTS = {"a": 30.0, "b": 60.0, "c": 90.0}


def attempt(**kw) -> Attempt:
    base = dict(launch_id=3, returncode=0, finished=frozenset(PENDING), stored=frozenset(PENDING),
                log="logs/launch-3.log", log_tail="last line")
    base.update(kw)
    for key in ("finished", "stored"):
        base[key] = frozenset(base[key])
    return Attempt(**base)


def test_every_case_finished_is_nothing_to_settle():
    out = settle(attempt(), PENDING, TIMEOUTS)
    assert out.rows == () and out.pending == () and out.launch_status is None


def test_a_timeout_settles_its_case_and_the_rest_run_again():
    out = settle(attempt(returncode=-9, finished={"a"}, stored={"a"}, timed_out_case="b"), PENDING, TIMEOUTS)
    (row,) = out.rows
    assert (row.case_id, row.status) == ("b", "timeout")
    assert row.reason.startswith("no progress for 60 s; launch killed, rank stacks in logs/launch-3.rank*")
    assert row.reason.endswith("(log logs/launch-3.log): last line")
    assert out.pending == ("c",) and out.launch_status[0] == "timeout"


def test_a_crash_fails_its_case_with_the_exit_status_and_the_hosts():
    out = settle(attempt(returncode=137, finished=set(), stored=set(), crashed_case="a", hosts_note=" on h01"),
                 PENDING, TIMEOUTS)
    assert [(r.case_id, r.status) for r in out.rows] == [("a", "failed")]
    assert "ranks exited with status 137 on h01" in out.rows[0].reason
    assert out.pending == ("b", "c") and out.launch_status == ("failed", "ranks exited with status 137 on h01")


def test_a_kill_after_the_victims_row_landed_keeps_the_measurement():
    out = settle(attempt(returncode=-9, finished={"a"}, stored={"a", "b"}, timed_out_case="b"), PENDING, TIMEOUTS)
    assert out.rows == () and out.pending == ("c",) and out.launch_status is None


def test_a_launch_that_died_without_a_kill_fails_every_case_left_and_ends():
    out = settle(attempt(returncode=1, finished={"a"}, stored={"a"}), PENDING, TIMEOUTS)
    assert [(r.case_id, r.status) for r in out.rows] == [("b", "failed"), ("c", "failed")]
    assert out.pending == () and out.launch_status[0] == "failed"
    assert "launch failed with status 1 before finishing its Cases" in out.rows[0].reason


def test_exit_zero_with_cases_missing_is_a_failure_too():
    out = settle(attempt(returncode=0, finished={"a", "b"}, stored={"a", "b"}), PENDING, TIMEOUTS)
    assert [(r.case_id, r.status) for r in out.rows] == [("c", "failed")] and out.pending == ()


def test_a_launcher_that_never_started_names_why_not_the_exit_status():
    why = "launcher failed to start ranks (2 attempts): ORTE daemon timed out"
    out = settle(attempt(returncode=1, finished=set(), stored=set(), start_failure=why, hosts_note=" on h02"),
                 PENDING, TIMEOUTS)
    assert {r.status for r in out.rows} == {"failed"} and len(out.rows) == 3
    assert out.rows[0].reason == f"{why}; launch on h02 (log logs/launch-3.log)"


def test_the_wave_limit_names_itself_and_ends_the_cases_not_run_as_timeout():
    out = settle(attempt(returncode=-9, finished={"a"}, stored={"a"}, timed_out_case="b", wave_over=True),
                 PENDING, TIMEOUTS)
    assert [(r.case_id, r.status) for r in out.rows] == [("b", "timeout"), ("c", "timeout")]
    assert out.rows[0].reason.startswith(WAVE_LIMIT_REASON + "; launch killed")
    assert out.rows[1].reason.startswith(f"{WAVE_LIMIT_REASON} before this Case ran")
    assert out.pending == () and out.launch_status[0] == "timeout"


def test_the_wave_limit_with_nothing_left_changes_nothing():
    out = settle(attempt(wave_over=True), PENDING, TIMEOUTS)
    assert out.rows == () and out.pending == ()
