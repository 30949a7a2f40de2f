"""The reference runs shipped under references/ are run folders that report, compare and
accept --baseline take: their rows are the measured CSVs byte for byte, their run.json says where
the rows came from and that no samples were kept, and a run of yours is held against them."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from commbench.analysis.commands import report_cmd
from commbench.commands.compare_cmd import compare_cmd
from commbench.commands.accept_cmd import accept_cmd
from commbench.runfolder.reader import load_run

ROOT = Path(__file__).resolve().parents[2]
REFS = sorted(p.parent for p in (ROOT / "references").glob("*/*/results.csv"))
RULES = ROOT / "references" / "within-10pct.yaml"


def test_the_references_are_there():
    names = {str(p.relative_to(ROOT / "references")) for p in REFS}
    assert {"h200x1/collectives", "h200x1/parity", "h200x2/x2"} <= names


@pytest.mark.parametrize("ref", REFS, ids=lambda p: p.parent.name + "/" + p.name)
def test_a_reference_is_the_measurement_it_names(ref):
    run = load_run(ref)
    info = run.meta["reference"]
    source = ROOT / info["converted_from"].split(" ")[0]
    assert source.is_file() and (ref / "results.csv").read_bytes() == source.read_bytes()
    assert info["measured_on"][:4] == "2026" and info["commit"] and info["command"]
    assert "samples.csv" in info["not_kept"] and run.samples.empty and not (ref / "samples.csv").exists()
    if info["machine_info"] != "not kept":   # every machine field is the measurement's info.json
        machine = json.loads((ROOT / info["machine_info"]).read_text())
        assert {k: run.meta[k] for k in machine} == machine
    assert (run.results["status"] == "ok").sum() > 0


def _yours(tmp_path: Path, ref: Path, slower: dict | None = None) -> Path:
    """A run 'of yours' with the reference's points and per-iteration samples (1% spread);
    ``slower`` maps (op, size_bytes) to a factor on those points' times."""
    run = tmp_path / "mine"
    run.mkdir(parents=True)
    df = pd.read_csv(ref / "results.csv", keep_default_na=False)
    times = pd.to_numeric(df["time_us"], errors="coerce")
    for (op, size), factor in (slower or {}).items():
        times[(df["op"] == op) & (df["size_bytes"] == size)] *= factor
    df["time_us"] = times
    df.to_csv(run / "results.csv", index=False)
    rows = []
    for case_id, t, status in zip(df["case_id"], times, df["status"]):
        if status == "ok" and t > 0:
            rows += [dict(case_id=case_id, rank=0, host="n0", gpu=0, iteration=i,
                          time_us=t * (1 + 0.01 * ((i % 5) - 2) / 2)) for i in range(20)]
    pd.DataFrame(rows).to_csv(run / "samples.csv", index=False)
    return run


def test_compare_takes_a_reference_and_weighs_noise_by_your_samples(tmp_path):
    ref = ROOT / "references" / "h200x1" / "collectives"
    same = CliRunner().invoke(compare_cmd, [str(ref), str(_yours(tmp_path / "a", ref)), "--fail-above", "5"])
    assert same.exit_code == 0, same.output
    assert "PASS" in same.output
    # one size 2x slower, one run a side: a Case's whole-run state would look the same (docs/report.md)
    one = CliRunner().invoke(compare_cmd, [str(ref), str(_yours(tmp_path / "b", ref, {("all_reduce", 1 << 30): 2.0})),
                                           "--fail-above", "5"])
    assert one.exit_code == 3 and "INCONCLUSIVE" in one.output, one.output
    sizes = {(op, int(size)) for op, size in pd.read_csv(ref / "results.csv")[["op", "size_bytes"]].values
             if op == "all_reduce"}
    slow = CliRunner().invoke(compare_cmd, [str(ref), str(_yours(tmp_path / "c", ref, dict.fromkeys(sizes, 2.0))),
                                            "--fail-above", "5"])
    assert slow.exit_code == 1, slow.output
    assert "failing points" in slow.output and "all_reduce" in slow.output.split("failing points")[1]


def test_two_references_without_samples_compare_as_threshold_or_cant_tell():
    ref = str(ROOT / "references" / "h200x1" / "collectives")
    res = CliRunner().invoke(compare_cmd, [ref, ref, "--fail-above", "5"])
    assert res.exit_code == 0, res.output


def test_accept_baseline_takes_a_reference(tmp_path):
    ref = ROOT / "references" / "h200x1" / "collectives"
    ok = CliRunner().invoke(accept_cmd, [str(_yours(tmp_path / "a", ref)), "--rules", str(RULES),
                                         "--baseline", str(ref)])
    assert ok.exit_code == 0, ok.output
    slow = {(op, 1 << 30): 1.5 for op in ("all_reduce", "all_gather", "reduce_scatter", "alltoall",
                                           "broadcast", "reduce", "sendrecv")}
    slow.update({(op, 1 << e): 1.5 for op, _ in list(slow) for e in range(26, 34)})
    bad = CliRunner().invoke(accept_cmd, [str(_yours(tmp_path / "b", ref, slow)), "--rules", str(RULES),
                                          "--baseline", str(ref)])
    assert bad.exit_code == 1, bad.output


def test_report_of_a_reference(tmp_path):
    ref = ROOT / "references" / "h200x2" / "x2"
    res = CliRunner().invoke(report_cmd, [str(ref), "--out", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "r.md").read_text()
    assert "converted_from=docs/measurements/2026-11-29-h200x2/x2-results.csv" in md


def test_the_converter_rebuilds_the_shipped_folders(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("convert", ROOT / "references" / "convert.py")
    convert = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(convert)
    for folder in convert.build(tmp_path):
        shipped = ROOT / "references" / folder.relative_to(tmp_path)
        for name in ("results.csv", "run.json"):
            assert (folder / name).read_bytes() == (shipped / name).read_bytes(), shipped / name
    shutil.rmtree(tmp_path)
