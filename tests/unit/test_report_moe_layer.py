"""report: the MoE layer section (a stacked bar per backend and overlap: the layer's step split from
its timeline; the table with the parts and what two-batch overlap hid)."""
from __future__ import annotations

import base64
import re

from click.testing import CliRunner

from commbench.analysis.commands import report_cmd
from commbench.analysis.report.build import build_report
from commbench.analysis.report.moe_layer import _bars, layer_figure, layer_rows, layer_table
from commbench.runfolder.reader import load_run
from commbench.runfolder.writer import RunFolder


def layer_row(i, model, phase, backend, overlap, parts, layer, status="ok"):
    """A layer row; parts = (dispatch, experts, combine). Serial: nothing overlaps; two_batch: half
    of the dispatch and half of the combine ran under the other micro-batch's experts."""
    d, e, c = parts
    hidden = (d + c) / 2 if overlap == "two_batch" else 0.0
    idle = 5.0
    step = d + e + c - hidden + idle
    return {"suite": "moe-layer", "bench": phase, "case_id": f"c{i}", "family": "moe",
            "op": "layer", "backend": backend, "variant": "default", "dtype": "bfloat16",
            "size_bytes": 128 * 7168 * 2, "count": 128, "world_size": 8, "num_nodes": 1,
            "ranks_per_node": 8, "warmup": 3, "iters": 10, "timing": "events",
            "time_us": layer, "time_us_min": layer, "time_us_p90": layer, "time_us_max": layer,
            "algbw_gbps": 1.0, "busbw_gbps": 1.0, "wrong": 0, "status": status, "reason": "",
            "log": "", "model": model, "phase": phase, "overlap": overlap,
            "tokens_per_rank": 128, "layer_us": layer, "step_us": step, "dispatch_us": d, "expert_us": e,
            "combine_us": c, "comm_us": d + c, "compute_us": e, "copy_us": 0.0,
            "exposed_comm_us": d + c - hidden, "overlap_pct": 100.0 * hidden / (d + c), "idle_us": idle,
            "tbo_hidden_us": hidden if overlap == "two_batch" else None,
            "tbo_gain_pct": 100.0 * hidden / (d + c) if overlap == "two_batch" else None,
            "serial_us": d + e + c, "comm_share": (d + c) / step, "slowest_rank": 3,
            "overlap_gain": (d + e + c) / layer, "tokens_per_s": 128 / layer * 1e6,
            "grouped_gemm": "grouped_mm", "max_token_err": 0.003}


def make_run(tmp_path):
    rows = []
    i = 0
    for model in ("deepseek-v3", "mixtral-8x7b"):
        for backend, parts in (("ipc_ll", (40.0, 100.0, 80.0)), ("nccl_a2a", (300.0, 100.0, 350.0))):
            i += 1
            rows.append(layer_row(i, model, "decode", backend, "none", parts, sum(parts) + 5))
            i += 1
            rows.append(layer_row(i, model, "decode", backend, "two_batch", parts, 0.8 * sum(parts)))
    rows.append(layer_row(99, "deepseek-v3", "decode", "deepep_ll", "none", (1, 1, 1), 1,
                          status="skipped"))
    folder = RunFolder(tmp_path / "run")
    folder.create(resume=False)
    for row in rows:
        folder.append_row(row)
    return tmp_path / "run"


def test_layer_bars_are_the_step_split_per_backend_and_overlap(tmp_path):
    from commbench.analysis.report import step_bars
    from commbench.measure.step_split import invariant_problems

    df = load_run(make_run(tmp_path)).results
    rows = layer_rows(df)
    assert len(rows) == 8 and set(rows["backend"]) == {"ipc_ll", "nccl_a2a"}   # skipped left out
    assert all(invariant_problems(r) == [] for r in rows.to_dict("records"))
    labels, bars = _bars(rows[rows["model"] == "deepseek-v3"])
    assert labels == ["ipc_ll none", "ipc_ll two_batch", "nccl_a2a none", "nccl_a2a two_batch"]
    # compute (the experts), no copy, exposed communication, idle: they stack to the step
    assert step_bars.parts(bars[1]) == [100.0, 0.0, 60.0, 5.0] and bars[1]["step_us"] == 165.0
    table = layer_table(df)
    assert list(table.columns[:3]) == ["model", "phase", "backend"]
    assert {"tbo_hidden_us", "tbo_gain_pct", "exposed_comm_us", "idle_us", "overlap_gain", "tokens_per_s",
            "serial_us", "slowest_rank"} <= set(table.columns)
    tb = table[(table["overlap"] == "two_batch") & (table["backend"] == "ipc_ll")].iloc[0]
    assert tb["tbo_hidden_us"] == 60.0 and tb["tbo_gain_pct"] == 50.0


def test_rows_of_an_older_run_keep_their_table_but_get_no_bars(tmp_path):
    df = load_run(make_run(tmp_path)).results.drop(columns=["step_us", "idle_us", "exposed_comm_us"])
    assert not layer_table(df).empty and layer_figure(df) is None


def test_report_has_the_layer_section_and_its_plot(tmp_path):
    run = make_run(tmp_path)
    doc = build_report([load_run(run)])
    titles = [s.title for s in doc.sections]
    assert "MoE layer" in titles and titles.index("MoE layer") < titles.index("Tables")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(report_cmd, [str(run), "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert ">MoE layer</h2>" in page
    imgs = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(imgs) == 3 and all(base64.b64decode(i)[:4] == b"\x89PNG" for i in imgs)
    assert (tmp_path / "r_files" / "moe_layer.png").stat().st_size > 1000


def test_no_layer_rows_no_section():
    from pathlib import Path

    runs = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
    doc = build_report([load_run(runs / "cpu-base")])
    assert "MoE layer" not in [s.title for s in doc.sections]


def test_runs_and_routings_get_bars_of_their_own(tmp_path):
    """Two runs overlaid, or a routing sweep, in one panel: a bar per backend, overlap and value,
    none dropped."""
    import pandas as pd

    df = load_run(make_run(tmp_path)).results
    first = layer_rows(df)
    first = first[first["overlap"] == "none"]
    second = first.assign(exposed_comm_us=first["exposed_comm_us"] * 2)
    both = pd.concat([first.assign(run="before"), second.assign(run="after")], ignore_index=True)
    labels, bars = _bars(both[both["model"] == "deepseek-v3"])
    got = {lab: b["exposed_comm_us"] for lab, b in zip(labels, bars)}
    assert got == {"ipc_ll none\nbefore": 120.0, "ipc_ll none\nafter": 240.0, "nccl_a2a none\nbefore": 650.0,
                   "nccl_a2a none\nafter": 1300.0}
    routed = pd.concat([first.assign(routing="random"), second.assign(routing="zipf")], ignore_index=True)
    labels, _ = _bars(routed[routed["model"] == "mixtral-8x7b"])
    assert labels == ["ipc_ll none\nrandom", "ipc_ll none\nzipf", "nccl_a2a none\nrandom", "nccl_a2a none\nzipf"]


def test_rows_measured_on_an_h200_keep_the_invariants_and_draw(tmp_path):
    """The layer rows of tests/gpu/suites/moe-layer-timeline.yaml on one H200 (2026-12-03): every
    row keeps the split's invariants, two_batch rows say what overlap hid, the view draws them."""
    from pathlib import Path

    import pandas as pd

    from commbench.measure.step_split import invariant_problems
    from commbench.ui import headline

    df = pd.read_csv(Path(__file__).parent / "fixtures" / "moe_layer" / "timeline_results.csv")
    rows = layer_rows(df)
    assert len(rows) == 10
    assert all(invariant_problems(r) == [] for r in df.to_dict("records"))
    two = rows[rows["overlap"] == "two_batch"]
    assert (two["tbo_hidden_us"] <= two["comm_us"] - two["exposed_comm_us"] + 1e-6).all()
    assert rows.loc[rows["overlap"] == "none", "tbo_hidden_us"].isna().all()
    assert layer_figure(df) is not None and {"tbo_hidden_us", "tbo_gain_pct"} <= set(layer_table(df).columns)
    line = headline(two.iloc[0].to_dict())
    assert line.startswith("layer ") and "exposed" in line and "two-batch hid" in line
