"""--resume repairs the folder before it measures (RunFolder.repair): unclaimed samples, cut and
non-UTF-8 lines and temporary files are dropped, and Cases whose samples are gone are measured again.
The last test does it through real runs (marked mpi)."""
from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

from commbench.runfolder import RunFolder
from commbench.runfolder.reader import load, load_run
from tests.conftest import needs_mpi

ROOT = Path(__file__).resolve().parents[2]
SUITE = textwrap.dedent("""\
    name: g
    defaults: {ranks: 2, warmup: 1, iters: 3, sizes: [8B]}
    benchmarks:
      - {name: first, family: harness, ops: [barrier]}
    """)


def row(cid: str, status: str = "ok") -> dict:
    return {"case_id": cid, "status": status, "time_us": 1.0, "wrong": 0, "size_bytes": 8}


def sample(cid: str, i: int) -> dict:
    return {"case_id": cid, "rank": 0, "host": "h", "gpu": "cpu", "iteration": i, "time_us": 1.0}


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _run_folder(path: Path) -> RunFolder:
    """A run folder as `commbench run` leaves it: locked once, run.json, a Case with samples."""
    f = RunFolder(path)
    f.claim(resume=False)
    f.write_meta({"suite": "g"})
    f.append_samples([sample("a", i) for i in range(2)])
    f.append_row(row("a"))
    f.release()
    return f


def test_resume_repair_drops_non_utf8_lines_before_anything_is_measured(tmp_path):
    f = _run_folder(tmp_path)
    f.append_samples([sample("b", i) for i in range(2)])
    with open(tmp_path / "results.jsonl", "ab") as fh:
        fh.write(b'{"case_id": "b", "status": "ok", "size_bytes": 8, "time_us": 1.0, "reason": "\xff\xfe"}\n')
    f2 = RunFolder(tmp_path)
    f2.claim(resume=True)
    f2.repair()
    assert f2.done_case_ids() == {"a"}   # b's row was damaged: b is measured again
    (tmp_path / "results.jsonl").read_bytes().decode("utf-8")
    f2.release()
    assert list(load(tmp_path)["case_id"]) == ["a"]   # the reader accepts what --resume continues


def test_resume_repair_measures_again_a_case_with_a_non_utf8_sample(tmp_path):
    f = _run_folder(tmp_path)
    f.append_samples([sample("b", i) for i in range(2)])
    f.append_row(row("b"))
    data = (tmp_path / "samples.csv").read_bytes().replace(b"b,0,h,cpu", b"b,0,\xff,cpu")
    (tmp_path / "samples.csv").write_bytes(data)
    f2 = RunFolder(tmp_path)
    f2.claim(resume=True)
    f2.repair()
    assert f2.done_case_ids() == {"a"}
    f2.release()
    rows = list(csv.DictReader(io.StringIO((tmp_path / "samples.csv").read_bytes().decode("utf-8"))))
    assert {r["case_id"] for r in rows} == {"a"}


def test_resume_measures_again_the_cases_whose_samples_are_gone(tmp_path):
    f = _run_folder(tmp_path)
    f.append_samples([sample("b", i) for i in range(2)])
    f.append_row(row("b"))
    f.append_row(row("s", "skipped"))   # no samples by nature
    (tmp_path / "samples.csv").unlink()
    f2 = RunFolder(tmp_path)
    f2.claim(resume=True)
    f2.repair()
    assert f2.done_case_ids() == {"s"}
    f2.append_samples([sample("a", i) for i in range(2)])
    f2.append_row(row("a"))   # measured again: done
    assert f2.done_case_ids() == {"a", "s"}
    f2.release()


@needs_mpi
def test_a_resume_after_samples_were_deleted_leaves_no_ok_row_without_samples(tmp_path):
    suite = tmp_path / "g.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "commbench", "run", str(suite), "--out", str(out), "--quiet"]
    first = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    (out / "samples.csv").unlink()
    again = subprocess.run(cmd + ["--resume"], env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    run = load_run(out)
    ok = set(run.results.loc[run.results["status"] == "ok", "case_id"])
    assert ok and ok <= set(run.samples["case_id"])
    assert len(list(csv.DictReader(open(out / "results.csv")))) == len(ok)


def test_resume_repair_drops_unclaimed_samples_cut_lines_and_temporary_files(tmp_path):
    f = RunFolder(tmp_path)
    f.claim(resume=False)
    f.write_meta({"suite": "s"})
    f.release()
    f.append_samples([sample("a", i) for i in range(2)])
    f.append_row(row("a"))
    f.append_samples([sample("b", i) for i in range(2)])   # killed before b's row
    with open(tmp_path / "samples.csv", "a") as fh:
        fh.write("c,0,h,cp")                               # killed mid-line
    with open(tmp_path / "results.jsonl", "a") as fh:
        fh.write('[1, 2]\n{"no_case_id": 1}\n"text"\n')    # valid JSON that is not a row
    (tmp_path / ".run.json.tmp").write_text("{")
    f2 = RunFolder(tmp_path)
    f2.claim(resume=True)
    f2.repair()
    f2.release()
    ids = Counter(r["case_id"] for r in csv.DictReader(open(tmp_path / "samples.csv")))
    assert ids == {"a": 2}
    assert not list(tmp_path.glob(".*.tmp"))
    assert [r["case_id"] for r in RunFolder(tmp_path).latest_rows()] == ["a"]
