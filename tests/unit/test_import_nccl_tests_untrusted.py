"""`commbench import nccl-tests` trusts nothing it reads: bounded files, lines and values, no
device or pipe, no file twice, no negative time, no rows of another op, a full disk named; and a
1-rank import headlines no bandwidth that means nothing (issue 31 item 2, 9; issue 30 item 6)."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.analysis.import_nccl_tests import convert
from commbench.cli import cli

FX = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_tests"
AR = FX / "all_reduce_perf.txt"


def _fails(tmp_path: Path, *files, expect: tuple[str, ...], code: int = 2, env: dict | None = None) -> str:
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["import", "nccl-tests", *map(str, files), "--out", str(out)], env=env)
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output and "this is a bug" not in res.output, res.output
    for text in expect:
        assert text in res.output, res.output
    assert not out.exists() and not list(tmp_path.glob(".out.*"))
    return res.output


def _edited(tmp_path: Path, src: Path, old: str, new: str, name: str | None = None) -> Path:
    text = src.read_text()
    assert old in text
    out = tmp_path / (name or src.name)
    out.write_text(text.replace(old, new, 1))
    return out


def _line_with(path: Path, text: str) -> int:
    return next(i for i, ln in enumerate(path.read_text().splitlines(), start=1) if text in ln)


def test_devices_pipes_and_folders_are_refused_before_reading(tmp_path):
    _fails(tmp_path, "/dev/zero", expect=("/dev/zero", "not a regular file"))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)   # nobody writes to it: reading it would block for ever
    _fails(tmp_path, fifo, expect=("pipe", "not a regular file"))
    (tmp_path / "dir").mkdir()
    _fails(tmp_path, tmp_path / "dir", expect=("a folder",))


def test_a_huge_rank_number_is_refused_with_its_line(tmp_path):
    bad = _edited(tmp_path, AR, "Rank  0", "Rank  999999999")
    n = _line_with(bad, "Rank  999999999")
    _fails(tmp_path, bad, expect=(f"all_reduce_perf.txt:{n}:", "Rank 999999999"))
    bad = _edited(tmp_path, AR, "Rank  0", "Rank  " + "9" * 5000)   # past Python's int() digit limit
    _fails(tmp_path, bad, expect=(f"all_reduce_perf.txt:{n}:", "Rank"))


def test_settings_sizes_and_counts_are_bounded(tmp_path):
    bad = _edited(tmp_path, AR, "nThread 1", "nThread 99999999")
    _fails(tmp_path, bad, expect=("all_reduce_perf.txt:3:", "nThread"))
    bad = _edited(tmp_path, AR, "   536870912     134217728", "999999999999999999 134217728")
    _fails(tmp_path, bad, expect=("all_reduce_perf.txt:", "size 999999999999999999"))


def test_file_size_and_line_length_are_capped(tmp_path):
    _fails(tmp_path, AR, expect=("above the limit of 1000 bytes", "COMMBENCH_MAX_IMPORT_BYTES"),
           env={"COMMBENCH_MAX_IMPORT_BYTES": "1000"})
    long = tmp_path / "long.txt"
    long.write_text(AR.read_text().replace("#\n", "#" + "x" * 20000 + "\n", 1))
    n = _line_with(long, "xxxx")
    _fails(tmp_path, long, expect=(f"long.txt:{n}:", "characters"))


def test_the_same_file_twice_is_refused(tmp_path):
    _fails(tmp_path, AR, AR, expect=("given twice",))
    alias = tmp_path / "alias.txt"
    alias.symlink_to(AR)
    _fails(tmp_path, AR, alias, expect=("given twice",))
    copy = tmp_path / "all_reduce_perf.txt"   # same name, same points, another file: repeated points
    copy.write_bytes(AR.read_bytes())
    _fails(tmp_path, AR, copy, expect=("repeats the point",))


@pytest.mark.parametrize("value", ["-6.94", "nan", "inf"])
def test_negative_or_non_finite_times_are_refused_not_ok(tmp_path, value):
    bad = _edited(tmp_path, AR, "     6.94 ", f" {value:>8} ")
    n = _line_with(bad, f" {value} ")
    _fails(tmp_path, bad, expect=(f"all_reduce_perf.txt:{n}:", "out-of-place time"))


def test_json_values_are_checked_not_trusted(tmp_path):
    doc = json.loads((FX / "all_reduce_perf.json").read_text())
    cases = [
        (("results", 2, "out_of_place", "time"), -3.0, "results[2].out_of_place.time"),
        (("config", "nthreads"), 10**9, "config.nthreads"),
        (("config", "aggregated_iterations"), "many", "aggregated_iterations"),
        (("config", "devices", 0, "rank"), 999999999, "config.devices[0].rank"),
        (("results", 1, "size"), "1e99", "results[1].size"),
    ]
    for keys, value, expect in cases:
        d = json.loads(json.dumps(doc))
        target = d
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value
        path = tmp_path / "all_reduce_perf.json"
        path.write_text(json.dumps(d))
        _fails(tmp_path, path, expect=(expect,))
    d = json.loads(json.dumps(doc))
    d["results"][0]["out_of_place_per_iter"] = {"times_us": [1.0, "x"]}
    path.write_text(json.dumps(d))
    _fails(tmp_path, path, expect=("times_us[1]",))
    path.write_text('{"a": ' + "[" * 100000 + "]" * 100000 + "}")
    _fails(tmp_path, path, expect=("nested too deeply",))   # not a RecursionError


def test_rows_of_another_op_under_a_header_are_refused(tmp_path):
    """all_gather rows pasted under an all_reduce header: on one rank size, count and bandwidths
    fit both ops; nccl-tests' redop column (none for all_gather) tells them apart."""
    ag = (FX / "all_gather_perf.txt").read_text().splitlines(keepends=True)
    ar = AR.read_text().splitlines(keepends=True)
    rows = [ln for ln in ag if ln.strip() and ln.split()[0].isdigit() and ln.split()[0] != "0"]
    head = [ln for ln in ar if not (ln.strip() and ln.split()[0].isdigit())]
    footer = next(i for i, ln in enumerate(head) if ln.startswith("# Out of bounds"))
    bad = tmp_path / "mixed.txt"
    bad.write_text("".join(head[:footer] + rows + head[footer:]))
    n = _line_with(bad, rows[0].strip())
    _fails(tmp_path, bad, expect=(f"mixed.txt:{n}:", "not a row of all_reduce_perf", "'none'"))


def test_one_rank_points_headline_no_meaningless_bandwidth():
    rows, _, _, _ = convert([AR, FX / "broadcast_perf.txt"])
    ar_oop = [r for r in rows if r["op"] == "all_reduce" and not r["in_place"] and r["status"] == "ok"]
    assert ar_oop and all(r["busbw_gbps"] is None and r["algbw_gbps"] > 0 for r in ar_oop[-3:])
    assert all("(n-1)/n" in r["reason"] for r in ar_oop)
    in_place = [r for r in rows if r["in_place"] and r["status"] == "ok"]
    # the broadcast in-place timer artefact (1 GiB "moved" in 0.25 us) is gone
    assert in_place and all(r["busbw_gbps"] is None and r["algbw_gbps"] is None for r in in_place)
    assert all("launch cost" in r["reason"] for r in in_place)
    bc = [r for r in rows if r["op"] == "broadcast" and not r["in_place"] and r["size_bytes"] >= 2**20]
    assert all(0 < r["busbw_gbps"] < 10_000 for r in bc)   # a copy on one GPU: real bandwidth


def test_a_full_disk_is_named_and_leaves_nothing(tmp_path, monkeypatch):
    from commbench.runfolder import RunFolder

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(RunFolder, "write_meta", full)
    out = _fails(tmp_path, AR, code=1, expect=("No space left on device", "nothing was left"))
    assert str(tmp_path / "out") in out.replace("\n", "")
