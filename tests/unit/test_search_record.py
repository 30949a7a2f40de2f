"""A damaged `searches` record in run.json (analysis/accept/search_record.py) is bad input: accept
exits 2 naming the file and the key, never a failing verdict carrying Python's error text."""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from commbench.analysis.accept.search_check import search_checks
from commbench.cli import cli
from commbench.errors import RunFolderError
from commbench.placement.search_plan import SearchPlanner

ROOT = Path(__file__).resolve().parents[2]
NODES = [f"n{i:02d}" for i in range(8)]


def finished_record() -> dict:
    p, record = SearchPlanner(NODES, seed=5), {"nodes": NODES, "settings": {"seed": 5}, "waves": [], "bench": "b"}
    while (w := p.next_wave()) is not None:
        outcome = {g: True for g in w}
        record["waves"].append({"wave": p.waves, "phase": p.phase,
                                "groups": [{"hosts": list(g), "passed": ok, "why": "x"} for g, ok in outcome.items()]})
        p.observe(outcome)
    record["done"] = True
    return record


def damage(record: dict, how: str) -> dict:
    r = copy.deepcopy(record)
    if how == "nodes missing":
        del r["nodes"]
    elif how == "waves a string":
        r["waves"] = "lots"
    elif how == "hosts a string":
        r["waves"][0]["groups"][0]["hosts"] = "n00"
    elif how == "passed a string":
        r["waves"][0]["groups"][0]["passed"] = "yes"
    elif how == "groups missing":
        del r["waves"][1]["groups"]
    elif how == "settings a list":
        r["settings"] = [5]
    return r


KEYS = {"nodes missing": "searches[0].nodes is missing", "waves a string": "searches[0].waves is 'lots'",
        "hosts a string": "searches[0].waves[0].groups[0].hosts", "passed a string": "groups[0].passed is 'yes'",
        "groups missing": "searches[0].waves[1].groups is missing", "settings a list": "searches[0].settings"}


def test_a_whole_record_is_judged():
    assert [v.check for v in search_checks({"searches": [finished_record()]}, "R/run.json")] == ["strategy search (b)"]


@pytest.mark.parametrize("how", sorted(KEYS))
def test_a_damaged_record_names_the_file_and_key(how):
    with pytest.raises(RunFolderError) as info:
        search_checks({"searches": [damage(finished_record(), how)]}, "R/run.json")
    assert str(info.value).startswith("R/run.json: ") and KEYS[how] in str(info.value)


def test_searches_that_is_not_a_list_is_named():
    with pytest.raises(RunFolderError, match=r"R/run\.json: searches is 'x'"):
        search_checks({"searches": "x"}, "R/run.json")


@pytest.mark.parametrize("how", ["nodes missing", "passed a string"])
def test_accept_of_a_run_with_a_damaged_record_is_exit_2_naming_run_json(tmp_path, how):
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "fixtures" / "runs" / "cpu-base", run)
    meta = json.loads((run / "run.json").read_text())
    meta["searches"] = [damage(finished_record(), how)]
    (run / "run.json").write_text(json.dumps(meta))
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {name: r, metric: time_us, op: '>=', value: 0}\n")
    result = CliRunner().invoke(cli, ["accept", str(run), "--rules", str(rules)])
    assert result.exit_code == 2, result.output
    assert f"{run / 'run.json'}: searches[0]" in result.output and "Traceback" not in result.output
