"""`compare --confirm N`: the NEW Cases found worse are measured again on this machine and judged
again. A real slowdown (the harness spin stretched by slow_pct 200) is confirmed and fails the gate
(exit 1); a slowdown the re-runs do not show (NEW's stored rows slow, the suite NEW's folder holds
at full speed: a disturbance that has gone) is "not reproduced" and no longer fails. The options are
refused before anything is compared: --confirm without --fail-above, NEW without its suite file."""
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.commands.confirm import CONFIRMED, NOT_REMEASURED, NOT_REPRODUCED, UNSURE, rejudge
from tests.conftest import needs_mpi

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
SUITE = """\
name: spin
defaults: {ranks: 2, sizes: {min: 1KiB, max: 64KiB, factor: 2}, dtypes: [int32], warmup: 2, iters: 20,
           timeout_s: 60}
benchmarks:
  - {name: spin, family: harness, backends: [mpi], ops: [spin], params: {spin_ns_per_byte: 20, slow_pct: SLOW}}
"""


def _point(size: int, verdict: str, ratio: float, why: str = "", floor: float = 1.0, p: float = 1e-4) -> dict:
    return dict(family="harness", op="spin", backend="mpi", variant="default", dtype="int32", size_bytes=size,
                world_size=2, in_place=None, time_ratio=ratio, change_pct=100 * (ratio - 1), noise_pct=floor,
                p_adjusted=p, repeats_to_tell=float("nan"), verdict=verdict, why=why)


def test_rejudge_keeps_what_reproduces_and_drops_what_does_not():
    points = pd.DataFrame([_point(1024, "worse", 3.0), _point(2048, "worse", 3.0), _point(4096, "worse", 3.0),
                           _point(8192, "unchanged", 1.0)])
    fresh = pd.DataFrame([_point(1024, "worse", 2.9, "p < 0.001"), _point(2048, "unchanged", 1.01),
                          _point(4096, "missing", float("nan"), "missing in new")])
    fresh["in_place"] = float("nan")   # an empty cell read back as NaN still pairs with None
    out = rejudge(points, points.iloc[:3], fresh, 3, 5.0, lost={})
    assert list(out["confirm"]) == [CONFIRMED, NOT_REPRODUCED, NOT_REMEASURED, ""]
    assert list(out["verdict"]) == ["worse", "unchanged", "worse", "unchanged"]
    assert out.loc[0, "why"] == "confirmed by 3 re-run(s) on this machine (first run +200.0 %): p < 0.001"
    assert "its first verdict stands" in out.loc[2, "why"]
    # worse again, but by less than the gate: not reproduced as a failure of the gate
    small = rejudge(points.iloc[:1], points.iloc[:1], pd.DataFrame([_point(1024, "worse", 1.03)]), 3, 5.0, {})
    assert small.loc[0, "confirm"] == NOT_REPRODUCED


def test_a_few_points_worse_again_beyond_their_noise_are_confirmed_without_the_mirror_test():
    """Three re-measured points cannot pass the mirror test (it wants five moving one way): the fresh
    comparison calls them can't tell; beyond their floor at the same significance they still fail."""
    points = pd.DataFrame([_point(1024, "worse", 1.5), _point(2048, "worse", 1.5), _point(4096, "worse", 1.5)])
    fresh = pd.DataFrame([_point(1024, "can't tell", 1.5, floor=10.0, p=0.001),      # beyond: confirmed
                          _point(2048, "can't tell", 1.5, floor=80.0, p=0.001),      # within its floor
                          _point(4096, "can't tell", 1.5, floor=10.0, p=0.2)])       # not significant
    out = rejudge(points, points, fresh, 3, 5.0, {}, alpha=0.05)
    assert list(out["confirm"]) == [CONFIRMED, UNSURE, UNSURE]
    assert list(out["verdict"]) == ["worse", "can't tell", "can't tell"]
    from commbench.analysis.compare_gate import gate

    assert gate(out, 5.0).exit_status == 1 and gate(out.iloc[1:], 5.0).exit_status == 3


def test_key_values_pair_across_types():
    from commbench.commands.confirm import _norm

    assert _norm(4096.0) == _norm(4096) == "4096" and _norm(None) == _norm(float("nan")) == ""
    assert _norm(True) == "True" and _norm("default") == "default" and _norm(0.5) == "0.5"


def test_the_case_cut_tells_in_place_from_out_of_place(tmp_path):
    from types import SimpleNamespace

    from commbench.commands.confirm import cut_suite
    from commbench.suite import load_suite

    (tmp_path / "s.yaml").write_text("name: s\ndefaults: {ranks: 2, sizes: [4KiB, 8KiB], iters: 3}\nbenchmarks:\n"
                                     "  - {name: b, family: collectives, backends: [mpi], ops: [all_gather],\n"
                                     "     params: {in_place: [false, true]}}\n")
    suite = load_suite(tmp_path / "s.yaml", gpu_count=0)
    rows = pd.DataFrame([dict(family=c.family, op=c.op, backend=c.backend, variant=c.variant, dtype=c.dtype,
                              size_bytes=c.size_bytes, world_size=c.ranks, in_place=c.param("in_place"),
                              case_id=c.case_id) for c in suite.cases])
    worse = rows[(rows["in_place"] == True) & (rows["size_bytes"] == 8192)].drop(columns="case_id")  # noqa: E712
    cut, lost = cut_suite(suite, worse, [SimpleNamespace(results=rows)])
    assert lost == {} and [(c.size_bytes, c.param("in_place")) for c in cut.cases] == [(8192, True)]
    assert [list(l.case_ids) for l in cut.launches] == [[cut.cases[0].case_id]]


def test_confirm_needs_the_gate_and_new_s_suite_file(tmp_path):
    res = CliRunner().invoke(cli, ["compare", str(RUNS / "cpu-base"), str(RUNS / "cpu-slow2x"), "--confirm", "2"])
    assert res.exit_code == 2 and "--confirm re-measures the points the gate finds worse" in res.output
    res = CliRunner().invoke(cli, ["compare", str(RUNS / "cpu-base"), str(RUNS / "cpu-slow2x"), "--fail-above",
                                   "5", "--confirm", "2", "--confirm-out", str(tmp_path / "c")])
    assert res.exit_code == 2 and "suite.yaml is not there" in res.output
    assert "compare cpu-base" not in res.output and not (tmp_path / "c").exists()


@pytest.fixture(scope="module")
def spins(tmp_path_factory):
    """BASE at full speed, NEW with every spin 3x as long, each run 3 times."""
    tmp = tmp_path_factory.mktemp("confirm")
    for name, slow in (("base", 0), ("new", 200)):
        (tmp / f"{name}.yaml").write_text(SUITE.replace("SLOW", str(slow)))
        res = CliRunner().invoke(cli, ["run", str(tmp / f"{name}.yaml"), "--out", str(tmp / name), "--quiet",
                                       "--repeat", "3"])
        assert res.exit_code == 0, res.output
    return tmp


@needs_mpi
def test_a_real_slowdown_is_confirmed_and_fails(spins):
    import re

    res = CliRunner().invoke(cli, ["compare", str(spins / "base"), str(spins / "new"), "--fail-above", "5",
                                   "--confirm", "2", "--confirm-out", str(spins / "again")])
    assert res.exit_code == 1, res.output
    found = re.search(r"(\d+) worse point\(s\) re-measured 2 time\(s\) on this machine \((\d+) Case\(s\)", res.output)
    worse, cases = int(found.group(1)), int(found.group(2))
    assert worse >= 5 and cases == worse and f": {worse} confirmed" in res.output   # 3x slower: 7 sizes
    assert sorted(p.name for p in (spins / "again").iterdir()) == ["repeat-1", "repeat-2"]
    rows = pd.read_csv(spins / "again" / "repeat-1" / "results.csv")
    assert len(rows) == worse and set(rows["op"]) == {"spin"}   # only the worse Cases were measured again
    again = CliRunner().invoke(cli, ["compare", str(spins / "base"), str(spins / "new"), "--fail-above", "5",
                                     "--confirm", "2", "--confirm-out", str(spins / "again")])
    assert again.exit_code == 2 and "already exists and is not an empty folder" in again.output


@needs_mpi
def test_a_slowdown_that_does_not_reproduce_no_longer_fails(spins, tmp_path):
    import shutil

    gone = tmp_path / "gone"
    shutil.copytree(spins / "new", gone)
    for repeat in gone.iterdir():   # NEW's rows stay slow; what it re-measures runs at full speed
        (repeat / "suite.yaml").write_text(SUITE.replace("SLOW", "0"))
    res = CliRunner().invoke(cli, ["compare", str(spins / "base"), str(gone), "--fail-above", "5", "--confirm", "2",
                                   "--confirm-out", str(tmp_path / "again"), "--json", str(tmp_path / "c.json")])
    assert res.exit_code in (0, 3), res.output   # 3 only for a point the first comparison could not tell
    import json

    doc = json.loads((tmp_path / "c.json").read_text())
    confirmed = [p for p in doc["points"] if p.get("confirm")]
    assert len(confirmed) >= 5 and {p["confirm"] for p in confirmed} == {NOT_REPRODUCED}
    assert doc["exit_status"] == res.exit_code and doc["confirm"]["runs"] == str(tmp_path / "again")
    assert f"{len(confirmed)} not reproduced" in res.output
