"""report: the MoE layer section (bars split into dispatch / experts / combine, overlapped beside)."""
from __future__ import annotations

import base64
import re

from click.testing import CliRunner

from commbench.analysis.commands import report_cmd
from commbench.analysis.report.build import build_report
from commbench.analysis.report.moe_layer import _bars, layer_rows, layer_table
from commbench.runfolder.reader import load_run
from commbench.runfolder.writer import RunFolder


def layer_row(i, model, phase, backend, overlap, parts, layer, status="ok"):
    d, e, c = parts
    return {"suite": "moe-layer", "bench": phase, "case_id": f"c{i}", "family": "moe",
            "op": "layer", "backend": backend, "variant": "default", "dtype": "bfloat16",
            "size_bytes": 128 * 7168 * 2, "count": 128, "world_size": 8, "num_nodes": 1,
            "ranks_per_node": 8, "warmup": 3, "iters": 10, "timing": "events",
            "time_us": layer, "time_us_min": layer, "time_us_p90": layer, "time_us_max": layer,
            "algbw_gbps": 1.0, "busbw_gbps": 1.0, "wrong": 0, "status": status, "reason": "",
            "log": "", "model": model, "phase": phase, "overlap": overlap,
            "tokens_per_rank": 128, "layer_us": layer, "dispatch_us": d, "expert_us": e,
            "combine_us": c, "serial_us": d + e + c, "comm_share": (d + c) / layer,
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


def test_layer_bars_split_parts_and_put_the_overlapped_time_beside(tmp_path):
    df = load_run(make_run(tmp_path)).results
    rows = layer_rows(df)
    assert len(rows) == 8 and set(rows["backend"]) == {"ipc_ll", "nccl_a2a"}   # skipped left out
    panel = rows[rows["model"] == "deepseek-v3"]
    bars = {b["backend"]: b for b in _bars(panel)}
    assert bars["ipc_ll"]["parts"] == [40.0, 100.0, 80.0]       # from the overlap=none row
    assert bars["ipc_ll"]["layer"] == 225.0
    assert abs(bars["nccl_a2a"]["overlapped"] - 0.8 * 750.0) < 1e-9
    table = layer_table(df)
    assert list(table.columns[:3]) == ["model", "phase", "backend"]
    assert {"comm_share", "overlap_gain", "tokens_per_s", "serial_us"} <= set(table.columns)


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
    """Two runs overlaid, or a routing sweep, in one panel: a bar per backend and value, none
    dropped (the first row of a backend used to stand for all of them)."""
    import pandas as pd

    df = load_run(make_run(tmp_path)).results
    first = layer_rows(df)
    second = first.assign(dispatch_us=first["dispatch_us"] * 2)
    both = pd.concat([first.assign(run="before"), second.assign(run="after")], ignore_index=True)
    panel = both[both["model"] == "deepseek-v3"]
    bars = _bars(panel)
    assert len(bars) == 4                                           # 2 backends x 2 runs
    got = {b["label"]: b["parts"][0] for b in bars}
    assert got == {"ipc_ll\nafter": 80.0, "ipc_ll\nbefore": 40.0, "nccl_a2a\nafter": 600.0,
                   "nccl_a2a\nbefore": 300.0}
    routed = pd.concat([first.assign(routing="random"), second.assign(routing="zipf")], ignore_index=True)
    labels = [b["label"] for b in _bars(routed[routed["model"] == "mixtral-8x7b"])]
    assert labels == ["ipc_ll\nrandom", "ipc_ll\nzipf", "nccl_a2a\nrandom", "nccl_a2a\nzipf"]
    assert [b["label"] for b in _bars(first[first["model"] == "deepseek-v3"])] == ["ipc_ll", "nccl_a2a"]
