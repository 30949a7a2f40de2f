"""--resume continues a run folder only with its own settings (suite content, --set, --only);
anything else is exit 2 naming the differences, unless --force (then run.json keeps both)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from click.testing import CliRunner

from commbench.cli import cli
from commbench.launch.resume_guard import differences
from commbench.runfolder.reader import load
from tests.conftest import needs_mpi

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"

SUITE = textwrap.dedent("""\
    name: g
    defaults: {ranks: 2, warmup: 1, iters: 3, sizes: [8B]}
    benchmarks:
      - {name: first, family: harness, ops: [barrier]}
      - {name: second, family: harness, ops: [barrier], sizes: [16B]}
    """)


def _folder(tmp_path, overrides: dict, suite_text: str = SUITE):
    """A run folder as `run` leaves it after an interrupted start (no rows needed to resume)."""
    suite = tmp_path / "g.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "run"
    (out / "logs").mkdir(parents=True)
    (out / "suite.yaml").write_text(suite_text)
    (out / "run.json").write_text(json.dumps({"suite": "g", "overrides": overrides}))
    return suite, out


def test_same_settings_are_no_difference(tmp_path):
    suite, out = _folder(tmp_path, {"iters": 100, "only": ["first"]})
    assert differences(out, {"overrides": {"iters": 100, "only": ["first"]}}, suite,
                       {"only": ["first"], "iters": 100}) == []


def test_a_dropped_set_is_refused_with_exit_2(tmp_path):
    suite, out = _folder(tmp_path, {"iters": 100})
    before = (out / "run.json").read_text()
    res = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--resume", "--quiet"])
    assert res.exit_code == 2, res.output
    assert "would mix settings" in res.output and "given before and not now: --set iters=100" in res.output
    assert "--force" in res.output and "Traceback" not in res.output
    assert (out / "run.json").read_text() == before and not (out / "plan.json").exists()


def test_changed_suite_and_only_are_named(tmp_path):
    suite, out = _folder(tmp_path, {"only": ["second"]}, SUITE.replace("iters: 3", "iters: 30"))
    res = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--resume", "--quiet",
                                   "--set", "warmup=2"])
    assert res.exit_code == 2
    assert "differs from the run's copy suite.yaml (first at line 2" in res.output
    assert "new now: --set warmup=2" in res.output
    assert "--only differs (second before, every benchmark now)" in res.output


def test_force_without_resume_is_bad_input(tmp_path):
    suite, _ = _folder(tmp_path, {})
    res = CliRunner().invoke(cli, ["run", str(suite), "--out", str(tmp_path / "x"), "--force"])
    assert res.exit_code == 2 and "--force only applies to --resume" in res.output


@needs_mpi
def test_force_mixes_and_run_json_keeps_both(tmp_path):
    suite = tmp_path / "g.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "run"
    runner = CliRunner()
    res = runner.invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", "--only", "first",
                              "--set", "iters=5"])
    assert res.exit_code == 0, res.output
    suite.write_text(SUITE.replace("warmup: 1", "warmup: 2"))
    res = runner.invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", "--resume", "--only", "second"])
    assert res.exit_code == 2
    res = runner.invoke(cli, ["run", str(suite), "--out", str(out), "--quiet", "--resume", "--force",
                              "--only", "second"])
    assert res.exit_code == 0, res.output
    df = load(out).set_index("bench")
    assert df.loc["first", "iters"] == 5 and df.loc["second", "iters"] == 3 and df.loc["second", "warmup"] == 2
    meta = json.loads((out / "run.json").read_text())
    forced = meta["forced_resumes"]
    assert len(forced) == 1 and forced[0]["earlier_overrides"] == {"only": ["first"], "iters": 5}
    assert any("--set iters=5" in d for d in forced[0]["differences"])
    assert forced[0]["earlier_suite"] == "suite.earlier-1.yaml"
    assert "warmup: 1" in (out / "suite.earlier-1.yaml").read_text()
    assert "warmup: 2" in (out / "suite.yaml").read_text()
    assert meta["overrides"] == {"only": ["second"]} and meta["earlier_overrides"] == [{"only": ["first"], "iters": 5}]


def test_a_folder_without_suite_copy_is_judged_by_run_json(tmp_path):
    """A folder from before suite copies were kept (the fixtures, older runs) still refuses
    another suite: run.json's suite hash, else its suite name, decides."""
    import hashlib
    import shutil

    suite, out = _folder(tmp_path, {})
    (out / "suite.yaml").unlink()
    (out / "run.json").write_text(json.dumps({"suite": "quickstart", "overrides": {}}))
    res = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--resume", "--quiet"])
    assert res.exit_code == 2, res.output
    assert "run.json records suite 'quickstart', this is suite 'g'" in res.output
    sha = hashlib.sha256(b"another suite").hexdigest()
    assert differences(out, {"suite": "g", "suite_sha256": sha}, suite, {}, "g")[0].startswith(
        f"the suite file {suite} differs from the one run.json records")
    same = hashlib.sha256(suite.read_bytes()).hexdigest()
    assert differences(out, {"suite": "g", "suite_sha256": same}, suite, {}, "g") == []
    assert differences(out, {"suite": "g"}, suite, {}, "g") == []
    fixture = tmp_path / "fixture"
    shutil.copytree(RUNS / "cpu-base", fixture)   # quickstart, no suite.yaml copy
    res = CliRunner().invoke(cli, ["run", str(suite), "--out", str(fixture), "--resume", "--quiet"])
    assert res.exit_code == 2 and "would mix settings" in res.output, res.output
