"""RunFolder storage: results.jsonl is the record, results.csv its latest-row-per-Case mirror."""
import csv
from pathlib import Path

import pytest

from commbench.runfolder import COLUMNS, RunFolder

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


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


def test_only_a_shared_folder_takes_the_writers_lock(tmp_path, monkeypatch):
    """A writer alone appends without the flock; the launches of a wave (SHARED_VAR set for their
    ranks, or the parent during the wave) take it for every append."""
    from commbench.runfolder import writers_lock
    from commbench.runfolder.writers_lock import SHARED_VAR

    taken = []
    real = writers_lock.fcntl.flock
    monkeypatch.setattr(writers_lock.fcntl, "flock", lambda fd, op: (taken.append(op), real(fd, op)))
    monkeypatch.delenv(SHARED_VAR, raising=False)
    alone = RunFolder(tmp_path)
    alone.create(resume=False)
    alone.append_samples([{"case_id": "a", "rank": 0, "iteration": 0, "time_us": 1.0}])
    alone.append_row(row("a"))
    assert taken == [] and not alone.shared
    monkeypatch.setenv(SHARED_VAR, "1")
    rank0 = RunFolder(tmp_path)
    rank0.append_samples([{"case_id": "b", "rank": 0, "iteration": 0, "time_us": 1.0}])
    rank0.append_row(row("b"))
    assert rank0.shared and len(taken) == 2
    assert [r["case_id"] for r in csv_rows(alone)] == ["a", "b"]


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
    # the row another writer stored just now is looked up by its case id (the live display's numbers)
    assert f.latest_row("a")["status"] == "ok" and f.latest_row("zz") is None


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


def test_a_writer_killed_between_jsonl_and_csv_loses_no_csv_row(tmp_path):
    parent = RunFolder(tmp_path)
    parent.create(resume=False)
    parent.append_row(row("a", "skipped"))
    parent.append_row(row("a2", "skipped"))
    with open(tmp_path / "results.jsonl", "a") as fh:   # rank 0: JSONL line written, then SIGKILL
        fh.write('{"case_id": "b", "status": "ok", "time_us": 2.0}\n')
    parent.append_row(row("c", "timeout"))
    assert [r["case_id"] for r in csv_rows(parent)] == ["a", "a2", "b", "c"]
    with open(tmp_path / "results.jsonl", "a") as fh:   # killed again; the parent writes nothing after
        fh.write('{"case_id": "d", "status": "ok", "time_us": 2.0}\n')
    parent.rewrite_csv()                                # what the parent does after every launch
    assert [r["case_id"] for r in csv_rows(parent)] == ["a", "a2", "b", "c", "d"]


def test_a_cut_csv_line_is_repaired_not_glued_to(tmp_path):
    f = RunFolder(tmp_path)
    f.create(resume=False)
    f.append_row(row("a"))
    f.append_row(row("b"))
    text = (tmp_path / "results.csv").read_text()
    (tmp_path / "results.csv").write_text(text[:-7])     # killed mid-line
    f.append_row(row("c"))
    assert [r["case_id"] for r in csv_rows(f)] == ["a", "b", "c"]
    assert all(r["status"] == "ok" for r in csv_rows(f))


def test_a_valid_line_missing_only_its_newline_is_kept(tmp_path):
    f = RunFolder(tmp_path)
    f.create(resume=False)
    f.append_row(row("a"))
    with open(tmp_path / "results.jsonl", "a") as fh:
        fh.write('{"case_id": "x", "status": "ok"}')      # complete JSON, newline never written
    f.append_row(row("c"))
    assert {r["case_id"] for r in f.latest_rows()} == {"a", "x", "c"}
    assert [r["case_id"] for r in csv_rows(f)] == ["a", "x", "c"]
    assert {r["case_id"] for r in RunFolder(tmp_path).latest_rows()} == {"a", "x", "c"}


def test_a_kill_after_the_victims_row_landed_retries_the_remaining_cases(tmp_path, monkeypatch):
    """The timed-out Case's row was stored just before the kill: the rest of the launch reruns
    (it used to be marked failed as if the launch had died before starting)."""
    import textwrap

    from commbench.launch import group
    from commbench.launch.supervise import LaunchOutcome
    from commbench.suite import load_suite

    suite_path = tmp_path / "s.yaml"
    suite_path.write_text(textwrap.dedent("""\
        name: s
        defaults: {ranks: 2, warmup: 1, iters: 3, sizes: [8B]}
        benchmarks:
          - {name: a, family: harness, ops: [barrier]}
          - {name: b, family: harness, ops: [barrier]}
          - {name: c, family: harness, ops: [barrier]}
        """))
    suite = load_suite(suite_path, gpu_count=0)
    by_id = {c.case_id: c for c in suite.cases}
    ids = [c.case_id for c in suite.cases]
    folder = RunFolder(tmp_path / "run")
    folder.create(resume=False)
    calls = []

    def fake_launch(run_dir, task, env, timeouts, on_event, allow_multicast, keep_fds=()):
        calls.append(list(task["case_ids"]))
        writer = RunFolder(run_dir)               # rank 0's own writer
        if len(calls) == 1:
            writer.append_row(row(ids[0]))
            writer.append_row(row(ids[1]))        # stored, then the watchdog fired
            return LaunchOutcome(-9, ids[1], None, ids[:2], ids[:1], 1.0)
        for cid in task["case_ids"]:
            writer.append_row(row(cid))
        return LaunchOutcome(0, None, None, task["case_ids"], task["case_ids"], 1.0)

    class Display:
        def event(self, _):
            pass

    monkeypatch.setattr(group, "run_launch", fake_launch)
    record = group.launch_record(suite.launches[0], held_off=True)
    group.run_group(group.GroupContext(folder, by_id, Display()), suite.launches[0], ids, record)
    assert calls == [ids, ids[2:]]
    assert [(r["case_id"], r["status"]) for r in csv_rows(folder)] == [(cid, "ok") for cid in ids]


def test_resume_meta_keeps_the_first_start_and_earlier_launches_and_overrides():
    from commbench.launch.prepare import overrides_meta, resume_meta

    previous = {"started_utc": "T0", "launches": [{"launch_id": 0}], "overrides": {"only": ["a"]}}
    meta = {"started_utc": "T1"}
    resume_meta(meta, previous, "T1")
    overrides_meta(meta, previous, {"only": ["b"]})
    assert meta["started_utc"] == "T0" and meta["resumed_utc"] == ["T1"]
    assert meta["launches"] == [{"launch_id": 0}]
    assert meta["overrides"] == {"only": ["b"]} and meta["earlier_overrides"] == [{"only": ["a"]}]
    fresh = {"started_utc": "T2"}
    resume_meta(fresh, {}, "T2")
    overrides_meta(fresh, {}, None)
    assert fresh == {"started_utc": "T2", "launches": [], "overrides": {}}


def test_param_columns_meta_records_each_family_of_the_suite_and_keeps_earlier_ones():
    from types import SimpleNamespace

    from commbench.families import get_family
    from commbench.launch.prepare import param_columns_meta

    suite = SimpleNamespace(cases=[SimpleNamespace(family="proxy"), SimpleNamespace(family="collectives")])
    meta = {}
    param_columns_meta(meta, {"param_columns": {"harness": ["victim_rank"]}}, suite)
    assert meta["param_columns"] == {"harness": ["victim_rank"],
                                     "collectives": list(get_family("collectives").params),
                                     "proxy": list(get_family("proxy").params)}
    assert "executor" in meta["param_columns"]["proxy"]


def _copy_with_meta(tmp_path, **keys):
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(RUNS / "cpu-base", run)
    meta = json.loads((run / "run.json").read_text())
    meta.update(keys)
    (run / "run.json").write_text(json.dumps(meta))
    return run


def test_a_folder_of_a_newer_schema_version_is_refused_by_every_reader(tmp_path):
    from click.testing import CliRunner

    from commbench.cli import cli
    from commbench.runfolder import SCHEMA_VERSION
    from commbench.runfolder.reader import RunFolderError, load, load_run, read_meta

    run = _copy_with_meta(tmp_path, schema_version=SCHEMA_VERSION + 1)
    for read in (load, load_run, read_meta):
        with pytest.raises(RunFolderError, match=rf"schema_version {SCHEMA_VERSION + 1} is newer than this "
                                                 rf"commbench reads \(schema_version {SCHEMA_VERSION}\)"):
            read(run)
    for args in (["report", str(run)], ["compare", str(RUNS / "cpu-base"), str(run)]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 2, res.output
        assert f"schema_version {SCHEMA_VERSION + 1} is newer" in res.output
        assert "Traceback" not in res.output
    assert not (run / "report.html").exists()


def test_an_equal_or_older_schema_version_is_read(tmp_path, monkeypatch):
    from commbench.runfolder import check
    from commbench.runfolder.reader import RunFolderError, load_run

    assert load_run(_copy_with_meta(tmp_path, schema_version=check.SCHEMA_VERSION)).meta["schema_version"] == 1
    monkeypatch.setattr(check, "SCHEMA_VERSION", 3)   # a later reader reads this version-1 folder
    assert len(load_run(RUNS / "cpu-base").results) > 0
    with pytest.raises(RunFolderError, match="schema_version 4 is newer"):
        load_run(_copy_with_meta(tmp_path / "b", schema_version=4))


@pytest.mark.parametrize("value", ["2", 1.5, True, 0, None])
def test_a_schema_version_that_is_not_a_positive_integer_is_refused(tmp_path, value):
    from commbench.runfolder.reader import RunFolderError, load_run

    with pytest.raises(RunFolderError, match="schema_version .* is not a positive integer"):
        load_run(_copy_with_meta(tmp_path, schema_version=value))


def test_param_columns_come_from_run_json_and_old_folders_fall_back_to_the_legacy_set(tmp_path):
    from commbench.runfolder.reader import RunFolderError, load_run, param_columns
    from commbench.runfolder.schema import LEGACY_PARAM_COLUMNS

    old = load_run(RUNS / "cpu-base")   # written before run.json had param_columns
    assert "param_columns" not in old.meta
    assert old.param_columns == [c for c in LEGACY_PARAM_COLUMNS if c in old.results.columns]
    assert "in_place" in old.param_columns and "status" not in old.param_columns
    new = load_run(_copy_with_meta(tmp_path, param_columns={"collectives": ["knob", "in_place"],
                                                            "harness": ["in_place", "dtype"]}))
    assert new.param_columns == ["in_place", "dtype"]   # recorded, present in the rows, once each
    assert param_columns({"param_columns": {"x": ["knob"]}}, ["knob", "op"]) == ["knob"]
    assert "knob" not in LEGACY_PARAM_COLUMNS
    with pytest.raises(RunFolderError, match="param_columns .* is not a map of family names"):
        load_run(_copy_with_meta(tmp_path / "bad", param_columns=["in_place"]))
