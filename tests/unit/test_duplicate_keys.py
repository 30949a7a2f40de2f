"""A samples.csv that holds one (case, rank, iteration) twice mixes two measurements (two launch
attempts that measured into one folder at once): every reader refuses it, naming the keys, and
report, compare, accept and trace exit 2 with that message (runfolder/check.py)."""
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.runfolder.reader import DuplicateKeys, RunFolderError, load_run, load_samples

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _folder(tmp_path: Path, name: str = "run") -> Path:
    out = tmp_path / name
    shutil.copytree(RUNS / "cpu-base", out)
    return out


def _duplicate(folder: Path, lines: list[int]) -> list[str]:
    """Append again the sample lines numbered ``lines`` (1: the header); their texts."""
    text = (folder / "samples.csv").read_text().splitlines(keepends=True)
    again = [text[i - 1] for i in lines]
    with open(folder / "samples.csv", "a") as fh:
        fh.writelines(again)
    return again


def test_a_clean_folder_reads(tmp_path):
    assert len(load_samples(_folder(tmp_path))) == 1680


def test_duplicate_sample_keys_are_refused_naming_them(tmp_path):
    folder = _folder(tmp_path)
    case, rank, _host, _gpu, iteration, _t = _duplicate(folder, [2, 40])[0].strip().split(",")
    with pytest.raises(DuplicateKeys) as err:
        load_run(folder)
    assert isinstance(err.value, RunFolderError) and len(err.value.keys) == 2
    message = str(err.value)
    assert "2 sample key(s) (case, rank, iteration) appear more than once" in message
    assert f"case '{case}' rank {rank} iteration {iteration} on lines 2, 1682" in message
    assert (case, int(rank), int(iteration)) in err.value.keys


def test_many_duplicates_are_counted_and_the_first_ones_named(tmp_path):
    folder = _folder(tmp_path)
    _duplicate(folder, list(range(2, 14)))
    with pytest.raises(DuplicateKeys, match=r"12 sample key\(s\) .* \(and 7 more\)"):
        load_samples(folder)


def test_the_same_key_in_two_burn_in_passes_is_no_duplicate(tmp_path):
    folder = _folder(tmp_path)
    lines = (folder / "samples.csv").read_text().splitlines()
    body = [f"{line},1" for line in lines[1:]] + [f"{line},2" for line in lines[1:]]
    (folder / "samples.csv").write_text("\n".join([lines[0] + ",pass", *body]) + "\n")
    assert len(load_samples(folder)) == 2 * 1680
    (folder / "samples.csv").write_text("\n".join([lines[0] + ",pass", *body, body[5]]) + "\n")
    with pytest.raises(DuplicateKeys, match=r"iteration \d+ pass 1 on lines"):
        load_samples(folder)


@pytest.mark.parametrize("command", ["report", "compare", "accept", "trace"])
def test_the_readers_exit_2_with_the_keys(tmp_path, command):
    folder = _folder(tmp_path)
    case = _duplicate(folder, [2])[0].split(",")[0]
    other = _folder(tmp_path, "other")
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {name: any, select: {op: all_reduce}, metric: time_us, op: '>=', value: 0}\n")
    argv = {"report": ["report", str(folder), "--out", str(tmp_path / "r.html")],
            "compare": ["compare", str(other), str(folder)],
            "accept": ["accept", str(folder), "--rules", str(rules), "--out", str(tmp_path / "a.html")],
            "trace": ["trace", str(folder), "--case", case, "--out", str(tmp_path / "t.json")]}[command]
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == 2, res.output
    assert "appear more than once" in res.output and f"case '{case}' rank 0 iteration 0" in res.output
    assert "Traceback" not in res.output
