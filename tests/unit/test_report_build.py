"""report: HTML self-contained with plots, Markdown twin, warnings sections, CLI."""
from __future__ import annotations

import base64
import re
from pathlib import Path

from click.testing import CliRunner

from commbench.analysis.report import tables
from commbench.analysis.report.build import build_report
from commbench.analysis.commands import report_cmd
from commbench.runfolder.reader import RunFolderError, load_run

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "runs"


def test_report_cli_writes_html_and_markdown(tmp_path):
    out = tmp_path / "r.html"
    res = CliRunner().invoke(report_cmd, [str(RUNS / "cpu-damaged"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert "http://" not in page and "https://" not in page  # no network needed to view it
    imgs = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(imgs) == 2
    assert all(base64.b64decode(i)[:4] == b"\x89PNG" for i in imgs)
    for title in ("Summary", "Curves", "Tables", "Run metadata", "Warnings"):
        assert f">{title}</h2>" in page
    md = (tmp_path / "r.md").read_text()
    assert "## Warnings" in md and "(r_files/busbw.png)" in md
    assert (tmp_path / "r_files" / "time.png").stat().st_size > 1000


def test_warnings_list_every_bad_row_with_reason():
    df = load_run(RUNS / "cpu-damaged").results
    assert set(tables.not_ok_rows(df)["status"]) == {"skipped", "failed", "timeout"}
    assert all(tables.not_ok_rows(df)["reason"].str.len() > 0)
    wrong = tables.wrong_rows(df)
    assert list(wrong["wrong"]) == [17]
    unstable = tables.unstable(df)
    assert list(unstable["op"]) == ["broadcast"] and unstable["p90_over_median"].iloc[0] == 2.5
    assert tables.unstable(load_run(RUNS / "cpu-base").results).empty


def test_summary_best_busbw_and_small_latency():
    df = load_run(RUNS / "cpu-base").results
    s = tables.summary(df)
    row = s[(s["op"] == "all_reduce") & (s["backend"] == "mpi")].iloc[0]
    ok = df[(df["op"] == "all_reduce") & (df["backend"] == "mpi")]
    assert row["best_busbw_gbps"] == round(ok["busbw_gbps"].max(), 2)
    assert row["small_msg_size"] == "512B"


def test_two_runs_overlay_in_one_report():
    doc = build_report([load_run(RUNS / "cpu-base"), load_run(RUNS / "cpu-slow2x")])
    summary = doc.sections[0].items[1]
    assert set(summary["run"]) == {"cpu-base", "cpu-slow2x"}


def test_not_a_run_folder_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(report_cmd, [str(tmp_path)])
    assert isinstance(res.exception, RunFolderError)
    assert "not a run folder" in str(res.exception)


def test_write_report_defaults_into_the_run_folder(tmp_path):
    import shutil

    from commbench.analysis.report.build import write_report

    run = tmp_path / "run"
    shutil.copytree(RUNS / "cpu-base", run)
    html_path, md_path = write_report([run])
    assert html_path == run / "report.html" and md_path.read_text().startswith("# commbench report")
