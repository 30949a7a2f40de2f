"""Real runs (marked mpi) keep a consistent folder: a full disk ends the run with exit 1 and
--resume finishes it, a stopped rank is a timeout row however it wakes, and --resume may be pointed
at the folder's own suite.yaml."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

from commbench.runfolder.reader import load_run
from tests.conftest import needs_mpi

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


SMALL = """name: s
defaults: {ranks: 2, sizes: [64B, 1KiB, 4KiB], warmup: 1, iters: 50, timeout_s: 60}
benchmarks:
  - {name: b, family: collectives, backends: [mpi], ops: [all_reduce, broadcast]}
"""


@needs_mpi
def test_resume_pointed_at_the_folders_own_suite(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(SMALL.replace("iters: 50", "iters: 2").replace("[64B, 1KiB, 4KiB]", "[64B]"))
    run = tmp_path / "run"
    first = subprocess.run([sys.executable, "-m", "commbench", "run", str(suite), "--out", str(run), "--quiet"],
                           env=_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    again = subprocess.run([sys.executable, "-m", "commbench", "run", str(run / "suite.yaml"), "--out", str(run),
                            "--resume", "--quiet"], env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Traceback" not in again.stderr
    assert (run / "suite.yaml").read_text() == suite.read_text()


@needs_mpi
def test_a_full_disk_ends_the_run_with_exit_1_and_a_consistent_folder(tmp_path):
    """Rank 0 may write at most 12 000 bytes per file (RLIMIT_FSIZE, set in the ranks only): its
    samples.csv fills up after two Cases. The run stops with exit 1 and a message; every stored
    row has all its samples; --resume with room finishes the rest."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent("""\
        import os, resource, signal
        if os.environ.get("OMPI_COMM_WORLD_RANK") is not None and os.environ.get("TEST_FSIZE"):
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails with EFBIG
            n = int(os.environ["TEST_FSIZE"])
            resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
        """))
    suite = tmp_path / "s.yaml"
    suite.write_text(SMALL)
    run = tmp_path / "run"
    env = {**_env(), "TEST_FSIZE": "12000"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    argv = [sys.executable, "-m", "commbench", "run", str(suite), "--out", str(run), "--quiet"]
    full = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert full.returncode == 1, full.stdout + full.stderr
    assert "is full" in full.stderr and "--resume" in full.stderr and "Traceback" not in full.stderr
    stored = load_run(run)                               # the reader accepts the folder as it is
    assert 0 < len(stored.results) < 6 and set(stored.results["status"]) == {"ok"}
    per_case = stored.samples.groupby("case_id").size().to_dict()
    assert per_case == {cid: 100 for cid in stored.results["case_id"]}
    assert not list(run.glob(".*.tmp"))
    env.pop("TEST_FSIZE")
    done = subprocess.run(argv + ["--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    final = load_run(run)
    assert len(final.results) == 6
    assert final.samples.groupby("case_id").size().to_dict() == {cid: 100 for cid in final.results["case_id"]}


@needs_mpi
def test_a_stopped_rank_is_a_timeout_however_it_wakes(tmp_path):
    """Rank 1 is stopped (SIGSTOP) inside the first Case and woken (SIGCONT) after the watchdog's
    verdict, while it asks the ranks for their stacks: rank 0 then finishes and stores the Case and
    starts the next. That late row must not count: the Case is `timeout`, the next runs once."""
    suite = tmp_path / "s.yaml"
    suite.write_text(textwrap.dedent("""\
        name: s
        defaults: {ranks: 2, warmup: 1, timeout_s: 4, sizes: [4B]}
        benchmarks:
          - {name: long, family: harness, ops: [barrier], iters: 20000}
          - {name: short, family: harness, ops: [barrier], iters: 5}
        """))
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "commbench", "run", str(suite), "--out", str(run), "--quiet"],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        progress = run / "logs" / "launch-0.progress.jsonl"
        first = _wait(lambda: progress.exists() and progress.read_text().startswith('{"event": "start"')
                      and json.loads(progress.read_text().splitlines()[0])["case_id"])
        rank1 = int((run / "logs" / "launch-0.rank1.pid").read_text().split()[1])
        os.kill(rank1, signal.SIGSTOP)
        stacks = run / "logs" / "launch-0.rank0.stacks.txt"
        _wait(lambda: stacks.exists() and stacks.stat().st_size > 0)
        os.kill(rank1, signal.SIGCONT)                    # after the verdict, before the kill
        out = proc.communicate(timeout=300)[0]
    finally:
        proc.kill()
    assert proc.returncode == 1, out
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert [(r["bench"], r["status"]) for r in rows] == [("long", "timeout"), ("short", "ok")], rows
    samples = Counter(r["case_id"] for r in csv.DictReader(open(run / "samples.csv")))
    assert first not in samples and list(samples.values()) == [10]


def _wait(cond, timeout_s: float = 120.0):
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        value = cond()
        if value:
            return value
        time.sleep(0.005)
    raise AssertionError("timed out waiting")
