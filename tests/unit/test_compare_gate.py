"""The gate never passes on nothing (exit 3, --allow-inconclusive), `compare --json` says what the
terminal says, and the one rule: the floor cap is tested before better/worse."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from click.testing import CliRunner

from commbench.analysis.compare_rule import CANT_TELL, Evidence, format_floor, judge, legend
from commbench.cli import cli

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
QUIET = [str(RUNS / "quiet-pair-a"), str(RUNS / "quiet-pair-b")]


def test_a_floor_above_the_cap_is_cant_tell_even_when_significant():
    # issue 40: floors of 1,210% and 1.23e5% were judged worse, against the printed rule
    for floor_pct in (1210.0, 1.23e5):
        verdict, why, repeats = judge(Evidence(math.log(50.0), math.log1p(floor_pct / 100), 1e-9), 5.0, 0.05)
        assert verdict == CANT_TELL and "> 900%" in why and "not even a 10x change" in why
    assert format_floor(1.17e19) == "> 900%" and format_floor(12.345) == "12.3%"


def test_the_legend_lists_the_rules_in_the_order_judge_tests_them():
    lines = legend(5.0, 0.05, "holm", 152)
    assert [ln.split(".")[0] for ln in lines] == ["0", "1", "2", "3", "4"]
    assert "above 900%" in lines[1] and "better or worse" in lines[2] and "unchanged" in lines[3]
    # rule 2 fails on the mirror test or on a busy single run: can't tell, never better/worse
    ev = Evidence(math.log(3.0), math.log(1.5), 1e-6, mirrored=False, single=True)
    assert judge(ev, 5.0, 0.05)[0] == CANT_TELL
    ev = Evidence(math.log(3.0), math.log(1.5), 1e-6, busy_single="NEW", single=True)
    verdict, why, repeats = judge(ev, 5.0, 0.05)
    assert verdict == CANT_TELL and "busy machine" in why and repeats == 3
    assert judge(Evidence(math.log(3.0), math.log(1.5), 1e-6), 5.0, 0.05)[0] == "worse"


def test_cant_tell_points_that_moved_up_make_the_gate_inconclusive():
    res = CliRunner().invoke(cli, ["compare", *QUIET, "--fail-above", "5"])
    assert res.exit_code == 3, res.output
    line = res.output.strip().splitlines()[-1]
    assert re.fullmatch(r"INCONCLUSIVE: \d+ point\(s\) can't tell \(moved up by more than 5% within their "
                        r"noise\); .*repeats.*", line), line
    res = CliRunner().invoke(cli, ["compare", *QUIET, "--fail-above", "5", "--allow-inconclusive"])
    assert res.exit_code == 0 and "PASS:" in res.output
    res = CliRunner().invoke(cli, ["compare", *QUIET, "--allow-inconclusive"])
    assert res.exit_code == 2 and "--fail-above" in res.output


def test_a_gate_far_above_every_change_passes():
    res = CliRunner().invoke(cli, ["compare", *QUIET, "--fail-above", "1e12"])
    assert res.exit_code == 0, res.output


def test_json_says_what_the_terminal_says(tmp_path):
    out = tmp_path / "c.json"
    res = CliRunner().invoke(cli, ["compare", str(RUNS / "cpu-base"), str(RUNS / "cpu-slow2x"), "--fail-above", "5",
                                   "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["schema"] == "commbench.compare/1" and doc["exit_status"] == res.exit_code
    counts = doc["counts"]
    assert counts["points"] == len(doc["points"]) == sum(counts[v] for v in counts if v != "points")
    worse = sum(p["verdict"] == "worse" for p in doc["points"])
    assert worse == doc["counts"]["worse"] == 84 and f"failing points ({worse})" in res.output
    assert doc["gate"]["status"] in ("fail", "inconclusive", "pass") and doc["gate"]["sentence"] in res.output
    for p in doc["points"]:
        assert set(p) >= {"op", "backend", "size_bytes", "verdict", "why", "change_pct", "noise_pct",
                          "noise_shown", "repeats_shown", "gate"}
        if p["noise_pct"] is not None and p["noise_pct"] > 900:
            assert p["noise_shown"] == "> 900%"
    assert "NaN" not in out.read_text() and "Infinity" not in out.read_text()


def test_json_on_stdout_leaves_the_text_on_stderr():
    res = CliRunner().invoke(cli, ["compare", *QUIET, "--fail-above", "5", "--json", "-"])
    doc = json.loads(res.stdout)
    assert doc["exit_status"] == res.exit_code == 3 and doc["gate"]["inconclusive"] > 0
    assert "INCONCLUSIVE" in res.stderr and "can't tell (" in res.stderr


def test_the_html_has_the_plot_and_short_rows(tmp_path):
    res = CliRunner().invoke(cli, ["compare", *QUIET, "--out", str(tmp_path / "c.html")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "c.html").read_text()
    assert html.count("data:image/png;base64,") == 1 and "> 900%" in html.replace("&gt;", ">")
    header = next(h for h in re.findall(r"<tr>(<th>.*?)</tr>", html) if "<th>verdict</th>" in h)
    assert re.findall(r"<th>(.*?)</th>", header)[-2:] == ["verdict", "why"]
    assert len(re.findall(r"<th>", header)) <= 12   # readable at 1400 px
    md = (tmp_path / "c.md").read_text()
    assert "compare_ratio.png" in md and "Verdicts, the first rule that holds" in md
