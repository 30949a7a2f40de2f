"""Repeat sets (analysis/runsets.py) say what is odd about them: a repeat of another suite, a copied
repeat, a folder named twice."""
import json
import shutil
from pathlib import Path

from commbench.analysis import runsets

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _repeat_set(tmp_path: Path, second: str) -> Path:
    out = tmp_path / "set"
    out.mkdir()
    shutil.copytree(FIXTURES / "quiet-pair-a", out / "repeat-1")
    shutil.copytree(FIXTURES / second, out / "repeat-2")
    return out


def test_a_repeat_of_another_suite_is_named(tmp_path, capsys):
    out = _repeat_set(tmp_path, "quiet-pair-b")
    meta = json.loads((out / "repeat-2" / "run.json").read_text())
    meta["suite"] = "other"
    (out / "repeat-2" / "run.json").write_text(json.dumps(meta))
    assert len(runsets.load_side([out])) == 2
    err = capsys.readouterr().err
    assert "warning:" in err and "2 different suites" in err and "other" in err


def test_a_copied_repeat_and_a_folder_named_twice_are_named(tmp_path, capsys):
    out = _repeat_set(tmp_path, "quiet-pair-a")
    runsets.load_side([out])
    assert "holds the same run as" in capsys.readouterr().err
    runsets.load_side([FIXTURES / "quiet-pair-a", FIXTURES / "quiet-pair-b", FIXTURES / "quiet-pair-a"])
    assert "counted twice" in capsys.readouterr().err
    runsets.load_side([FIXTURES / "quiet-pair-a", FIXTURES / "quiet-pair-b"])
    assert capsys.readouterr().err == ""
