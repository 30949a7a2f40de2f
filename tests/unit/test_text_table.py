"""Plain-text tables: a long column folds to the terminal's width; a pipe keeps each row whole."""
from __future__ import annotations

import io

import pandas as pd
from click.testing import CliRunner

from commbench.commands.accept_cmd import accept_cmd
from commbench.analysis.text_table import MIN_WRAP_WIDTH, terminal_width, text_table
from tests.unit.test_accept import RING_RULE, RUNS, _rules

REASON = "rank 4 (node03 gpu NVIDIA H200:0) is consistently slower than its peers (median excess 17.9%)"


def _frame() -> pd.DataFrame:
    return pd.DataFrame([{"check": "slow rank 4", "result": "fail", "measured": 17.9, "reason": REASON},
                         {"check": "ring", "result": "pass", "measured": 330.0, "reason": "ok"}])


def test_a_long_reason_folds_to_the_width_and_loses_no_word():
    lines = text_table(_frame(), wrap="reason", width=60).splitlines()
    assert max(map(len, lines)) <= 60 and len(lines) > 4
    start = lines[0].index("reason")
    folded = [line[start:] for line in lines[2:] if line[start:]]
    assert " ".join(folded[:-1]) == REASON and folded[-1] == "ok"
    assert lines[3].startswith(" " * start)   # a continuation line leaves the other cells blank
    assert lines[2].split()[:3] == ["slow", "rank", "4"]


def test_no_width_or_a_wide_one_keeps_each_row_on_one_line():
    whole = text_table(_frame())
    assert text_table(_frame(), wrap="reason") == whole == text_table(_frame(), wrap="reason", width=400)
    assert len(whole.splitlines()) == 4 and REASON in whole


def test_a_narrow_terminal_still_leaves_the_reason_some_room():
    lines = text_table(_frame(), wrap="reason", width=20).splitlines()
    start = lines[0].index("reason")
    assert max(len(line) - start for line in lines) <= MIN_WRAP_WIDTH
    assert max(len(line) - start for line in lines) > MIN_WRAP_WIDTH - 8


def test_terminal_width_is_the_terminals_or_columns_and_none_in_a_pipe(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("COLUMNS", raising=False)
    assert terminal_width(io.StringIO()) is None
    monkeypatch.setenv("COLUMNS", "72")
    assert terminal_width(io.StringIO()) == 72 and terminal_width(Tty()) == 72


def test_accept_folds_its_reasons_to_columns(tmp_path, monkeypatch):
    rules = _rules(tmp_path, RING_RULE + "localize: true\n")
    args = [str(RUNS / "gpu8-slowhost"), "--rules", str(rules), "--out", str(tmp_path / "a.html")]
    monkeypatch.delenv("COLUMNS", raising=False)
    piped = CliRunner().invoke(accept_cmd, args).output.splitlines()
    monkeypatch.setenv("COLUMNS", "200")
    folded = CliRunner().invoke(accept_cmd, args).output.splitlines()
    assert len(folded) > len(piped) and max(len(line) for line in folded if "wrote" not in line) <= 200
    assert any(line.rstrip().endswith("suspect host(s): node03") for line in piped)
