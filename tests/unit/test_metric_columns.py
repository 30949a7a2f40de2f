"""A metric is compared as a number (suite/metric_columns.py): `search: {metric: op}` and a rule's
`metric: status` name text columns and are refused where they are written, with the line."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from commbench.analysis.accept.rules import RulesError, load_rules
from commbench.cli import cli
from commbench.errors import SuiteError
from commbench.suite import load_suite
from commbench.suite.metric_columns import metric_refusal

SEARCH = """\
name: srch
defaults: {ranks: 1, warmup: 1, iters: 3, sizes: [1KiB]}
benchmarks:
  - name: net
    family: collectives
    ops: [all_reduce]
    backends: [mpi]
    placement: search
    search:
      seed: 1
      metric: METRIC
"""


@pytest.mark.parametrize("column", ["op", "status", "host", "variant", "in_place", "reduce_op", "model"])
def test_a_text_column_is_not_a_metric(column):
    assert "not a number" in metric_refusal(column)


@pytest.mark.parametrize("column", ["time_us", "busbw_gbps", "time_us_p99", "wrong", "exposed_comm_us"])
def test_measured_columns_are_metrics(column):
    assert metric_refusal(column) is None


@pytest.mark.parametrize("column", ["op", "status", "host"])
def test_a_search_metric_naming_a_text_column_is_refused_with_its_line(tmp_path, monkeypatch, column):
    monkeypatch.setenv("COMMBENCH_HOSTS", "a,b,c")
    path = tmp_path / "s.yaml"
    path.write_text(SEARCH.replace("METRIC", column))
    with pytest.raises(SuiteError) as info:
        load_suite(path, gpu_count=0)
    assert f"s.yaml:11: benchmarks[0] (net).search.metric: {column!r} is a column of text" in str(info.value)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "s.yaml:11:" in result.output


def test_a_search_metric_naming_a_measured_column_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("COMMBENCH_HOSTS", "a,b,c")
    path = tmp_path / "s.yaml"
    path.write_text(SEARCH.replace("METRIC", "busbw_gbps"))
    assert dict(load_suite(path, gpu_count=0).cases[0].param("search"))["metric"] == "busbw_gbps"


@pytest.mark.parametrize("column", ["op", "status", "backend"])
def test_a_rule_metric_naming_a_text_column_is_refused_with_its_line(tmp_path, column):
    path = tmp_path / "r.yaml"
    path.write_text(f"rules:\n  - name: r\n    metric: {column}\n    op: '>='\n    value: 1\n")
    with pytest.raises(RulesError) as info:
        load_rules(path)
    assert "r.yaml:3:" in str(info.value) and "not a number" in str(info.value)
