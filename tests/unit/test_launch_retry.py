"""A launch whose launcher failed before any rank started is started again (launch/start_retry.py):
through the real launch path with a stand-in launcher that fails as Open MPI does when a daemon
does not report back; never when a rank started; failed rows with the reason once retries are spent."""
import json
import os
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.errors import CommbenchError
from commbench.launch import start_retry
from commbench.launch.start_failure import START_FAILURES, launcher_message, ranks_reported, start_failure
from commbench.launch.start_retry import start_until_ranks_run
from commbench.runfolder.reader import load
from commbench.suite import load_suite
from tests.conftest import needs_mpi

DAEMON_MESSAGE = """\
--------------------------------------------------------------------------
A daemon failed to report back after being spawned. This could
be due to several factors, including inability to find the
daemon executable.
  Local host:    head
  Remote host:   node7
  Daemon exit status: 255
--------------------------------------------------------------------------"""

SUITE = """\
name: retry
defaults: {ranks: 2, warmup: 1, iters: 3, sizes: [8B, 64B], timeout_s: 60}
benchmarks:
  - {name: b, family: harness, ops: [barrier]}
"""


def _fake_launcher(tmp_path: Path, fail_times: int, after_real: bool = False) -> Path:
    """A launcher that fails its first ``fail_times`` starts with Open MPI's daemon message (exit
    1) and then runs the real mpiexec; with ``after_real`` it runs the real one every time and,
    when that fails, prints the daemon message as well. Starts are counted in ``count``."""
    from commbench.launch.mpiexec import find_mpiexec

    real = find_mpiexec()
    message = tmp_path / "message.txt"
    message.write_text(DAEMON_MESSAGE + "\n")
    script = tmp_path / "fake-mpiexec"
    count = tmp_path / "count"
    if after_real:
        body = f'"{real}" "$@"; rc=$?; [ $rc -ne 0 ] && cat "{message}" >&2; exit $rc'
    else:
        body = f'if [ "$n" -le {fail_times} ]; then cat "{message}" >&2; exit 1; fi\nexec "{real}" "$@"'
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1" in --version) exec "{real}" --version;; esac
        n=$(( $(cat "{count}" 2>/dev/null || echo 0) + 1 )); echo $n > "{count}"
        """) + body + "\n")
    script.chmod(0o755)
    return script


def _starts(tmp_path: Path) -> int:
    return int((tmp_path / "count").read_text())


@pytest.fixture(autouse=True)
def _fresh_mpiexec_lookup():
    """find_mpiexec is cached per process: the stand-in is found only on a fresh look-up, and the
    next test finds the real one again."""
    from commbench.sysinfo.mpi import find_mpiexec

    find_mpiexec.cache_clear()
    yield
    find_mpiexec.cache_clear()


def _run(tmp_path: Path, monkeypatch, fail_times: int, suite: str = SUITE, after_real: bool = False):
    launcher = _fake_launcher(tmp_path, fail_times, after_real)   # finds the real mpiexec first
    from commbench.sysinfo.mpi import find_mpiexec

    find_mpiexec.cache_clear()
    monkeypatch.setenv("COMMBENCH_MPIEXEC", str(launcher))
    monkeypatch.setattr(start_retry, "BACKOFF_S", 0.05)
    (tmp_path / "s.yaml").write_text(suite)
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["run", str(tmp_path / "s.yaml"), "--out", str(out), "--quiet"])
    return result, out, json.loads((out / "run.json").read_text())["launches"]


@needs_mpi
def test_a_daemon_that_did_not_report_back_is_retried_and_the_run_is_green(tmp_path, monkeypatch):
    result, out, launches = _run(tmp_path, monkeypatch, fail_times=1)
    assert result.exit_code == 0, result.output
    assert _starts(tmp_path) == 2
    df = load(out)
    assert len(df) == 2 and (df.status == "ok").all(), df[["status", "reason"]]
    [retry] = launches[0]["start_retries"]
    assert retry["attempt"] == 0 and retry["reason"].startswith("A daemon failed to report back")
    assert retry["backoff_s"] > 0 and launches[0]["status"] == "ok"
    assert "launch 0: the launcher failed to start its ranks (A daemon failed to report back" in result.output
    assert "retry 1 of 1" in result.output   # on the console, --quiet or not
    log = (out / "logs" / "launch-0.log").read_text()
    assert "attempt 0:" in log and "attempt 1:" in log   # both attempts in the launch's log


@needs_mpi
def test_retries_spent_give_failed_rows_that_say_the_launcher_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMBENCH_LAUNCH_RETRIES", "2")
    result, out, launches = _run(tmp_path, monkeypatch, fail_times=99)
    assert result.exit_code == 1, result.output
    assert _starts(tmp_path) == 3
    df = load(out)
    assert len(df) == 2 and (df.status == "failed").all()
    want = "launcher failed to start ranks (3 attempts): A daemon failed to report back after being spawned"
    assert df.reason.str.startswith(want).all(), df.reason.tolist()
    assert "logs/launch-0.log" in df.reason.iloc[0]
    assert [r["attempt"] for r in launches[0]["start_retries"]] == [0, 1]
    assert launches[0]["status"] == "failed" and launches[0]["reason"].startswith(want)


@needs_mpi
def test_the_suite_key_turns_retries_off(tmp_path, monkeypatch):
    monkeypatch.delenv("COMMBENCH_LAUNCH_RETRIES", raising=False)
    result, out, launches = _run(tmp_path, monkeypatch, fail_times=1, suite="launch_retries: 0\n" + SUITE)
    assert result.exit_code == 1
    assert _starts(tmp_path) == 1 and "start_retries" not in launches[0]
    assert load(out).reason.str.startswith("launcher failed to start ranks (1 attempt): A daemon").all()


@needs_mpi
def test_a_rank_that_started_and_crashed_is_never_retried(tmp_path, monkeypatch):
    """The ranks ran (one crashed in its Case); the launcher then even prints a daemon message:
    still a measurement, one start, a failed row about the ranks' exit."""
    suite = SUITE.replace("ops: [barrier]", "ops: [crash]").replace("sizes: [8B, 64B]", "sizes: [8B]")
    result, out, launches = _run(tmp_path, monkeypatch, fail_times=0, suite=suite, after_real=True)
    assert result.exit_code == 1
    assert _starts(tmp_path) == 1
    [row] = load(out).to_dict("records")
    assert row["status"] == "failed" and row["reason"].startswith("ranks exited with status")
    assert "start_retries" not in launches[0]


def _outcome(rc=1, started=(), timed_out=None, crashed=None):
    return SimpleNamespace(returncode=rc, timed_out_case=timed_out, crashed_case=crashed, started=list(started),
                           finished=[], wall_s=0.5)


def _folder(tmp_path: Path, text: str = DAEMON_MESSAGE) -> tuple[Path, dict]:
    (tmp_path / "logs").mkdir(exist_ok=True)
    (tmp_path / "logs" / "launch-4.log").write_text("=== launch 4 attempt 0: mpiexec ...\n" + text + "\n")
    return tmp_path, {"launch_id": 4, "ranks": 2, "log": "logs/launch-4.log", "attempt": 0}


def test_what_counts_as_a_start_failure(tmp_path):
    run_dir, task = _folder(tmp_path)
    t0 = time.time()
    assert start_failure(run_dir, task, _outcome(), 0, t0).startswith("A daemon failed to report back")
    assert start_failure(run_dir, task, _outcome(rc=0), 0, t0) is None
    assert start_failure(run_dir, task, _outcome(started=["c1"]), 0, t0) is None     # a Case began
    assert start_failure(run_dir, task, _outcome(timed_out="c1"), 0, t0) is None     # the watchdog killed it
    assert start_failure(run_dir, task, _outcome(crashed="c1"), 0, t0) is None
    log_size = (run_dir / task["log"]).stat().st_size
    assert start_failure(run_dir, task, _outcome(), log_size, t0) is None   # an earlier attempt's message
    # a rank that got through MPI start-up left its pid file (removed before each attempt): it ran
    (run_dir / "logs" / "launch-4.rank1.pid").write_text("host 123")
    assert start_failure(run_dir, task, _outcome(), 0, t0) is None


def test_rank_files_count_only_when_written_during_the_attempt(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    hosts = logs / "launch-2.hosts.json"
    hosts.write_text("{}")
    old = time.time() - 600
    os.utime(hosts, (old, old))   # an earlier attempt's
    assert not ranks_reported(tmp_path, 2, 2, since=time.time() - 1)
    hosts.write_text("{}")
    assert ranks_reported(tmp_path, 2, 2, since=time.time() - 1)


@pytest.mark.parametrize("line", [
    "A daemon failed to report back after being spawned. This could",
    "ORTE was unable to reliably start one or more daemons.",
    "PRTE was unable to reliably start one or more daemons.",
    "An ORTE daemon has unexpectedly failed after launch and before",
    "A daemon died unexpectedly with status 1 while attempting",
    "srun returned non-zero exit status (1) from launching",
    "[mpiexec@n1] HYDT_bscu_wait_for_completion (tools/bootstrap/utils/bscu_wait.c:76): one of the processes "
    "terminated badly; aborting",
    "srun: error: Unable to create step for job 4359715: Job/step already completing or completed",
    "srun: error: Task launch for StepId=12.0 failed on node n3: Socket timed out on send/recv operation",
    "srun: error: Application launch failed: Communication connection failure",
    "ssh: connect to host node7 port 22: Connection timed out",
    "ssh: Could not resolve hostname node7: Name or service not known",
])
def test_each_launcher_message_is_known(tmp_path, line):
    run_dir, task = _folder(tmp_path, "some banner\n" + line)
    assert launcher_message(run_dir / task["log"], 0) == line.strip()[:200]


@pytest.mark.parametrize("text", [
    "prterun detected that one or more processes exited with non-zero status",
    "Traceback (most recent call last):\nRuntimeError: NCCL error",
    "srun: error: n3: task 1: Exited with exit code 1",
    "===================   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
])
def test_a_ranks_own_failure_is_not_a_start_failure(tmp_path, text):
    run_dir, task = _folder(tmp_path, text)
    assert launcher_message(run_dir / task["log"], 0) is None


def test_docs_list_every_known_message():
    """docs/results.md's table is the code's: each pattern's leading words are in it."""
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text()
    for pattern, launcher, source in START_FAILURES:
        words = re.split(r"[\\(\[.|]", pattern)[0].strip()
        assert len(words) >= 4 and words in doc, (pattern, words)
        assert launcher and source


def _attempts(tmp_path, outcomes, retries, deadline=None):
    run_dir, task = _folder(tmp_path)
    calls, record = [], {"wall_s": 0.0}

    def start(attempt):   # each attempt writes its own launcher output, as mpiexec does
        calls.append(attempt)
        with open(run_dir / task["log"], "a") as log:
            log.write(f"=== launch 4 attempt {attempt}: mpiexec ...\n{DAEMON_MESSAGE}\n")
        return outcomes[len(calls) - 1]

    out, last, failed = start_until_ranks_run(start, run_dir, task, retries, record, note=lambda _l: None,
                                              deadline=deadline)
    return calls, record, failed


def test_a_retry_stays_inside_the_wave_time_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(start_retry, "BACKOFF_S", 5.0)
    calls, record, failed = _attempts(tmp_path, [_outcome()] * 3, retries=2, deadline=time.time() + 1.0)
    assert calls == [0] and "start_retries" not in record
    assert failed.attempts == 1 and "wave's time limit" in failed.why_stopped


def test_attempts_are_numbered_on_and_their_time_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(start_retry, "BACKOFF_S", 0.01)
    calls, record, failed = _attempts(tmp_path, [_outcome(), _outcome(), _outcome(rc=0)], retries=2)
    assert calls == [0, 1, 2] and failed is None
    assert record["wall_s"] == pytest.approx(1.0) and len(record["start_retries"]) == 2


@pytest.mark.parametrize("value", ["-1", "11", "yes", "two", "1.5"])
def test_the_suite_key_is_validated_with_its_line(tmp_path, value):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: retry\nlaunch_retries: {value}\n" + SUITE.split("\n", 1)[1])
    with pytest.raises(CommbenchError, match=r"s\.yaml:2: launch_retries: "):
        load_suite(path, gpu_count=8)


def test_the_setting_comes_from_env_then_suite_then_default(tmp_path, monkeypatch):
    monkeypatch.delenv("COMMBENCH_LAUNCH_RETRIES", raising=False)
    path = tmp_path / "s.yaml"
    path.write_text(SUITE)
    retries = lambda: load_suite(path, gpu_count=8).settings.launch_retries   # noqa: E731
    assert retries() == 1
    path.write_text("launch_retries: 3\n" + SUITE)
    assert retries() == 3
    monkeypatch.setenv("COMMBENCH_LAUNCH_RETRIES", "0")
    assert retries() == 0
    monkeypatch.setenv("COMMBENCH_LAUNCH_RETRIES", "lots")
    with pytest.raises(CommbenchError, match="COMMBENCH_LAUNCH_RETRIES"):   # refused at load: before any folder
        retries()
