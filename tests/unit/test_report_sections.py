"""The report's section registry: sections found like families, written by order when they apply,
family views keyed by family name, parameter columns read from run.json (never from the families)."""
from __future__ import annotations

import json
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from commbench.analysis.report import plots, sections
from commbench.analysis.report.build import build_report, report_input
from commbench.analysis.report.sections import ReportInput, all_sections
from commbench.runfolder.reader import load_run

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "tests" / "fixtures" / "runs"


def test_every_section_module_registers_one_section_in_a_fixed_order():
    # (base and _private helpers are not sections: the registry skips them)
    modules = {m.name for m in pkgutil.iter_modules(sections.__path__) if not m.name.startswith("_")} - {"base"}
    found = all_sections()
    assert len(found) == len(modules)   # a module without SECTION would be silently left out
    assert [s.name for s in found] == ["summary", "curves", "fleet", "bounds", "copy", "burnin", "health", "bitwise",
                                       "training", "step_timelines", "timelines", "moe_layer", "tables", "metadata",
                                       "warnings"]
    assert len({s.order for s in found}) == len(found)
    assert {s.name: s.family for s in found if s.family} == {"copy": "copy", "training": "training",
                                                              "moe_layer": "moe"}


def test_the_report_writes_the_sections_that_apply_in_their_order():
    doc = build_report([load_run(RUNS / "cpu-base")])
    assert [s.title for s in doc.sections] == ["Summary", "Curves", "Tables", "Run metadata", "Warnings"]


def _training_rows(family: str) -> pd.DataFrame:
    return pd.DataFrame([dict(family=family, op="fsdp", strategy="fsdp", status="ok", step_us=10.0,
                              compute_us=6.0, comm_us=5.0, exposed_comm_us=3.0, idle_us=1.0)])


def test_a_family_view_applies_only_to_rows_of_its_family():
    training = next(s for s in all_sections() if s.name == "training")
    own = ReportInput(runs=[], rows=_training_rows("training"), rehearsal="", param_columns=[])
    other = ReportInput(runs=[], rows=_training_rows("collectives"), rehearsal="", param_columns=[])
    assert training.applies_to(own) and not training.applies_to(other)
    no_column = ReportInput(runs=[], rows=_training_rows("training").drop(columns=["family"]), rehearsal="",
                            param_columns=[])
    assert not training.applies_to(no_column)
    from commbench.analysis.report.document import Document

    doc = Document("t")
    training.add(doc, own)
    assert doc.sections[0].title == "Training step: compute and communication"
    assert [i.alt for i in doc.images()] == ["training step breakdown"]


def _run_with_knob(tmp_path: Path, param_columns: dict | None) -> Path:
    """cpu-base with a column 'knob' that splits each all_reduce mpi curve in two."""
    run = tmp_path / "run"
    shutil.copytree(RUNS / "cpu-base", run)
    (run / "results.jsonl").unlink(missing_ok=True)   # the CSV alone is the record here
    df = pd.read_csv(run / "results.csv", keep_default_na=False)
    df["knob"] = [i % 2 for i in range(len(df))]
    df.to_csv(run / "results.csv", index=False)
    meta = json.loads((run / "run.json").read_text())
    if param_columns is not None:
        meta["param_columns"] = param_columns
    (run / "run.json").write_text(json.dumps(meta))
    return run


def test_a_parameter_recorded_in_run_json_splits_the_curves(tmp_path, monkeypatch):
    from commbench.analysis.report.sections import curves

    run = load_run(_run_with_knob(tmp_path / "a", {"collectives": ["knob", "in_place"]}))
    recorded = report_input([run])
    assert recorded.param_columns == ["knob", "in_place"]
    assert "knob" in plots.line_columns(recorded.rows, recorded.param_columns)
    labels = []

    def spy(df, metric, title="", params=()):
        fig = plots.metric_figure(df, metric, title, params)
        labels.extend(line.get_label() for ax in fig.axes for line in ax.get_lines())
        return fig
    monkeypatch.setattr(curves, "metric_figure", spy)
    build_report([run])
    assert {lab.split()[-1] for lab in labels} == {"knob=0", "knob=1"}
    old = report_input([load_run(_run_with_knob(tmp_path / "b", None))])   # no key: the legacy set
    assert "knob" not in old.param_columns
    assert "knob" not in plots.line_columns(old.rows, old.param_columns)


def test_building_a_report_never_imports_the_families(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "cpu-damaged", run)
    code = ("import sys\nfrom commbench.analysis.report.build import write_report\n"
            f"write_report([{str(run)!r}])\n"
            "print(sorted(m for m in sys.modules if m.startswith('commbench.families')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
    assert (run / "report.html").is_file()
