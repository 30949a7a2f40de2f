"""compare never claims what it cannot know: a point whose noise floor dwarfs any plausible change,
or whose change is within its own floor, is `can't tell` (with the repeats that would tell); the
counts add up (new, missing); the terminal gets plain text tables; can't tell never fails the gate."""
from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
from click.testing import CliRunner

from commbench.analysis.compare import CANT_TELL, VERDICTS, compare_runs
from commbench.analysis.compare_summary import summarize
from commbench.cli import cli
from commbench.runfolder.reader import load_run
from tests.unit.noise_sim import Machine

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def _counts_add_up(summary: pd.DataFrame) -> bool:
    return bool((summary[list(VERDICTS)].sum(axis=1) == summary["points"]).all())


def test_an_absurd_noise_floor_is_cant_tell_not_unchanged():
    """One point ran 9x faster with samples spread over twelve decades (its noise floor is beyond
    any change a real regression makes): compare cannot tell, whatever the change."""
    base, new = load_run(RUNS / "cpu-base"), load_run(RUNS / "cpu-rerun")
    cid = new.results["case_id"].iloc[3]
    t = float(new.results.loc[new.results.case_id == cid, "time_us"].iloc[0])
    sel = new.samples.case_id == cid
    spread = np.array([-6, -6, -6, 0, 0, 0, 0, 6, 6, 6], dtype=float)
    per_rank = new.samples.loc[sel].groupby("rank").cumcount().to_numpy()
    new.samples.loc[sel, "time_us"] = t / 9 * 10.0 ** spread[per_rank % len(spread)]
    new.results.loc[new.results.case_id == cid, "time_us"] = t / 9
    pts = compare_runs(base, new)
    odd = pts.loc[(pts.op == new.results.op.iloc[3]) & (pts.backend == new.results.backend.iloc[3])
                  & (pts.size_bytes == new.results.size_bytes.iloc[3])].iloc[0]
    assert odd["change_pct"] < -80 and odd["noise_pct"] > 1e6, odd
    assert odd["verdict"] == CANT_TELL and "noise floor" in odd["why"], odd
    assert math.isinf(odd["repeats_to_tell"])           # more than MOST_REPEATS: repeats will not help
    assert set(pts.drop(odd.name)["verdict"]) == {"unchanged"}


def test_no_point_is_better_or_worse_within_its_own_noise_floor():
    """Over simulated quiet pairs, single runs and repeats: every better/worse change is at least
    the point's noise floor; the ones below it are can't tell and say how many repeats would tell."""
    m, rng = Machine(), np.random.default_rng(7)
    seen_unsure = 0
    for repeats in (1, 1, 1, 3):
        pts = compare_runs([m.run(rng, f"a{i}") for i in range(repeats)],
                           [m.run(rng, f"b{i}", slow={("all_reduce", "mpi"): 1.25}) for i in range(repeats)])
        called = pts[pts.verdict.isin(["better", "worse"])]
        log_change = np.abs(np.log(called["time_ratio"].astype(float)))
        assert (log_change >= np.log1p(called["noise_pct"].astype(float) / 100) - 1e-3).all(), called
        unsure = pts[pts.verdict == CANT_TELL]
        seen_unsure += len(unsure)
        assert unsure["why"].str.len().gt(0).all()
        assert ((unsure["repeats_to_tell"] >= 2) | unsure["repeats_to_tell"].isna()).all()
    assert seen_unsure > 0


def test_a_real_quiet_pair_is_inconclusive_and_says_what_would_tell():
    """Two back-to-back quickstart runs on a quiet 2-core VM: no point worse, but points it cannot
    tell moved up by more than the gate: the gate does not pass on them (exit 3, one sentence with
    the repeats that would tell); --allow-inconclusive passes (exit 0) and lists them; plain text."""
    args = ["compare", str(RUNS / "quiet-pair-a"), str(RUNS / "quiet-pair-b"), "--fail-above", "5"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 3, res.output
    assert re.search(r"INCONCLUSIVE: \d+ point\(s\) can't tell .*repeats", res.output), res.output
    out = res.stdout
    assert "| --- |" not in out and "|" not in out
    assert re.search(rf"{CANT_TELL} \(\d+\):", out) and "repeats" in out
    ok = CliRunner().invoke(cli, args + ["--allow-inconclusive"])
    assert ok.exit_code == 0, ok.output
    m = re.search(rf"(\d+) point\(s\) {CANT_TELL} \(listed above\)", ok.stdout)
    assert m and int(m.group(1)) > 0, ok.stdout
    pts = compare_runs(load_run(RUNS / "quiet-pair-a"), load_run(RUNS / "quiet-pair-b"))
    flipped = pts[(pts.op == "reduce") & (pts.backend == "gloo") & (pts.size_bytes == 4096) & ~pts.in_place]
    assert flipped["verdict"].iloc[0] == CANT_TELL   # ~7x slower for most of one run: not "unchanged"
    assert _counts_add_up(summarize(pts))


def _copy(src: Path, dst: Path, drop_ops=()) -> Path:
    shutil.copytree(src, dst)
    df = pd.read_csv(dst / "results.csv", keep_default_na=False)
    df[~df["op"].isin(drop_ops)].to_csv(dst / "results.csv", index=False)
    return dst


def test_counts_add_up_with_new_and_missing_points(tmp_path):
    base = _copy(RUNS / "cpu-base", tmp_path / "base", drop_ops=["sendrecv"])
    new = _copy(RUNS / "cpu-rerun", tmp_path / "new", drop_ops=["reduce"])
    pts = compare_runs(load_run(base), load_run(new))
    s = summarize(pts).set_index("op")
    assert _counts_add_up(s.reset_index())
    assert s.loc["sendrecv", "new"] == s.loc["sendrecv", "points"] == 14
    assert s.loc["reduce", "missing"] == s.loc["reduce", "points"] == 14
    assert s.loc["all", "points"] == len(pts)
    res = CliRunner().invoke(cli, ["compare", str(base), str(new), "--fail-above", "10"])
    assert res.exit_code == 1 and "failing points (14)" in res.stdout   # the missing ones
    header = next(ln for ln in res.stdout.splitlines() if ln.startswith("op "))
    assert "new" in header.split() and "missing" in header.split()


def test_the_terminal_lists_worse_points_without_out():
    res = CliRunner().invoke(cli, ["compare", str(RUNS / "cpu-base"), str(RUNS / "cpu-slow2x")])
    assert res.exit_code == 0
    assert "worse (84):" in res.stdout and "|" not in res.stdout
    rows = [ln for ln in res.stdout.splitlines() if re.match(r"all_reduce\s+mpi\s", ln)]
    assert rows and all("+" in ln for ln in rows)       # change column: +100 or so
    assert max(len(ln) for ln in res.stdout.splitlines() if not ln.startswith(("op ", "---"))) <= 100


def test_the_rule_by_hand():
    """change +99% against a floor of 106%, significant: can't tell, and 2 repeats a side would tell;
    a 2x speedup (-50%) against a floor of 80% is as large as +100%, so it is better."""
    from commbench.analysis.compare_rule import Evidence, judge

    verdict, why, repeats = judge(Evidence(math.log(1.99), math.log(2.06), 0.001), 5.0, 0.05)
    assert verdict == CANT_TELL and repeats == 2 and "within its noise floor of 106%" in why
    assert judge(Evidence(math.log(0.5), math.log(1.8), 0.001), 5.0, 0.05)[0] == "better"
    assert judge(Evidence(math.log(1.01), math.log(1.2), 0.9), 5.0, 0.05)[0] == "unchanged"
