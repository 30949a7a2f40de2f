"""benchmarks/fleet_scale.py: its folders are valid run folders of the size asked, its growth
exponent is the slope on log axes, and a child's time and memory are the child's own."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from commbench.runfolder.reader import load_run

ROOT = Path(__file__).resolve().parents[2]


def _fleet():
    spec = importlib.util.spec_from_file_location("fleet_scale", ROOT / "benchmarks" / "fleet_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_growth_exponent_is_the_log_log_slope():
    f = _fleet()
    assert f.exponent([1000, 10_000, 100_000], [1.0, 10.0, 100.0]) == pytest.approx(1.0)
    assert f.exponent([1000, 10_000], [2.0, 2.0]) == pytest.approx(0.0)
    assert f.exponent([1000], [1.0]) != f.exponent([1000], [1.0])   # one size: NaN, no slope


def test_folders_hold_the_points_the_hosts_and_the_regression(tmp_path):
    f = _fleet()
    f.build_folder(tmp_path / "base", 1000, seed=1, regressed=False)
    f.build_folder(tmp_path / "new", 1000, seed=1, regressed=True)
    base, new = load_run(tmp_path / "base"), load_run(tmp_path / "new")
    assert len(base.results) == len(new.results) == 1000 and base.results["host"].nunique() == 10
    assert len(base.samples) == 1000 * f.RANKS * f.ITERS
    b = base.results.set_index("case_id")["time_us"]
    ratio = new.results.set_index("case_id")["time_us"] / b
    hit = new.results.set_index("case_id")
    regressed = (hit["op"] == f.REGRESSED[0]) & hit["size_bytes"].isin(f.REGRESSED[1])
    assert ratio[regressed].between(1.9, 2.1).all() and ratio[~regressed].between(0.9, 1.1).all()
    assert f.slow_hosts(10) == {5} and f.slow_hosts(1000) == {100, 300, 500, 700, 900}


@pytest.mark.skipif(not Path("/usr/bin/time").exists(), reason="needs /usr/bin/time")
def test_a_child_is_timed_and_measured_on_its_own():
    f = _fleet()
    big = f.timed([sys.executable, "-c", "x = bytearray(200 * 2**20); x[::4096] = b'1' * len(x[::4096])"])
    small = f.timed([sys.executable, "-c", "pass"])
    assert big["rc"] == small["rc"] == 0 and big["peak_mib"] > 200 > small["peak_mib"]
    assert f.timed([sys.executable, "-c", "raise SystemExit(3)"])["rc"] == 3
