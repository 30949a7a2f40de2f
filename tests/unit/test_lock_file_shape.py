"""The run folder's lock file (runfolder/lock.py) replaced by a folder: the message names the lock
file and what to do, and nothing is measured or written."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.runfolder.lock import LOCK_NAME, FolderLock, RunFolderBusy


def test_a_lock_replaced_by_a_folder_is_named(tmp_path):
    (tmp_path / LOCK_NAME).mkdir()
    with pytest.raises(RunFolderBusy) as info:
        FolderLock(tmp_path).acquire()
    assert f"the lock file {tmp_path / LOCK_NAME} is a folder" in str(info.value)
    assert FolderLock(tmp_path).dir_fd is None


def test_run_resume_into_a_folder_whose_lock_is_a_folder_is_exit_2_naming_the_lock(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\ndefaults: {ranks: 2, sizes: [8B]}\nbenchmarks:\n"
                     "  - {name: b, family: collectives, backends: [mpi], ops: [all_reduce]}\n")
    out = tmp_path / "run"
    (out / LOCK_NAME).mkdir(parents=True)
    result = CliRunner().invoke(cli, ["run", str(suite), "--out", str(out), "--resume", "--quiet"])
    assert result.exit_code == 2, result.output
    assert f"{LOCK_NAME} is a folder" in result.output and "Traceback" not in result.output
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]
