"""The end-of-run table and the report's Summary read one headline statistic: small-message latency
at the largest size up to 1 KiB, one row per op, backend, variant and in_place (issue 40: the
terminal said 4.84 us at 8 B where report.md said 26,163 us at 512 B for the same run)."""
from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from commbench.analysis.report import tables
from commbench.runfolder.reader import load
from commbench.ui import print_summary, small_message_pick

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def test_the_pick_is_the_largest_size_up_to_1_kib_else_the_smallest():
    assert small_message_pick([8, 64, 512, 4096]) == 2
    assert small_message_pick([4096, 512, 8, 1024]) == 3
    assert small_message_pick([8192, 4096, 65536]) == 1


def test_terminal_and_report_summary_show_the_same_time_per_row():
    df = load(RUNS / "quiet-pair-a")
    assert df["in_place"].astype(str).nunique() > 1   # the rows the terminal used to mix
    buf = io.StringIO()
    print_summary(Console(file=buf, width=200, force_terminal=False), df, RUNS / "x", [])
    shown = {}
    for line in buf.getvalue().splitlines():
        m = re.match(r"(\w+)\s+(mpi|gloo)\s+(True|False)\s+.*\s([\d,.]+) us @ (\S+)$", line)
        if m:
            shown[(m.group(1), m.group(2), m.group(3))] = (float(m.group(4).replace(",", "")), m.group(5))
    summary = tables.summary(df.assign(run="r"))
    assert len(shown) == len(summary) > 10
    for rec in summary.to_dict("records"):
        t, size = shown[(rec["op"], rec["backend"], str(rec["in_place"]))]
        assert size == rec["small_msg_size"] == "512B"
        assert abs(t - rec["small_msg_time_us"]) <= 0.01 * rec["small_msg_time_us"] + 0.06, (rec, t)
