"""Assemble the run report (summary, curves, tables, metadata, warnings) from run folders."""
from __future__ import annotations

import pandas as pd

from . import tables
from .document import Document
from ...runfolder.reader import Run
from .moe_layer import add_section as add_moe_layer_section
from .plots import figure_png, metric_figure, plot_title


def combined(runs: list[Run]) -> pd.DataFrame:
    """All runs' rows in one frame with a 'run' column (folder name) for overlays."""
    frames = []
    for run in runs:
        df = run.results.copy()
        df.insert(0, "run", run.label)
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def build_report(runs: list[Run]) -> Document:
    df = combined(runs)
    many = len(runs) > 1
    if not many and "run" in df.columns:
        df = df.drop(columns=["run"])  # one run: no need to name it on every line
    title = "commbench report: " + ", ".join(r.label for r in runs)
    doc = Document(title)

    n_ok = int((df["status"] == "ok").sum()) if "status" in df.columns else 0
    sec = doc.section("Summary")
    sec.text(f"{len(df)} points, {n_ok} ok, over {len(runs)} run(s). Best busbw is the highest "
             f"busbw over sizes; small-message latency is the median time at the largest size "
             f"<= {tables.SMALL_MESSAGE_BYTES} B.")
    sec.table(tables.summary(df), "no ok points")
    from ...sysinfo.load import busy_reasons

    if any(busy_reasons(r.meta.get("machine_load")) for r in runs):
        sec.text("Warning: the machine was busy during a run (see Warnings): its times may be noisy or slow.")

    rehearsed = _rehearsal_note(df)
    if rehearsed:
        sec.text("Correctness rehearsal: " + rehearsed)

    sec = doc.section("Curves")
    sec.text("One panel per op; one line per run/backend/variant (and dtype, in_place, world "
             "size, timing where they vary). Only ok rows. Log axes; busbw 0 (one rank) is not drawn.")
    title = plot_title(df, [r.meta for r in runs]) + (" [rehearsal: ranks shared a GPU, not speed]"
                                                      if rehearsed else "")
    for metric, name in (("busbw_gbps", "busbw.png"), ("time_us", "time.png")):
        fig = metric_figure(df, metric, title)
        sec.image(figure_png(fig) if fig is not None else None, f"{metric} vs size", name)

    _training_section(doc, df)

    from commbench.profile.timeline import add_section as add_timelines

    add_timelines(doc, runs)   # per-rank timelines and trace links, where the runs have them
    add_moe_layer_section(doc, df)   # only when the runs hold MoE layer rows

    sec = doc.section("Tables")
    for op, g in tables.points(df).groupby("op", sort=True):
        sec.sub(str(op)).table(g.drop(columns=["op"]))

    sec = doc.section("Run metadata")
    for run in runs:
        sec.sub(run.label).table(tables.metadata(run.meta), "no run.json")

    sec = doc.section("Warnings")
    from ...sysinfo.load import describe

    busy = [w for w in (describe(r.label, r.meta) for r in runs) if w]
    if busy:
        sub = sec.sub("Busy machine")
        for w in busy:
            sub.text(w)
    if rehearsed:
        sec.sub("Ranks shared a GPU").text(rehearsed)
    sub = sec.sub("Unstable points")
    sub.text(f"ok points whose p90 time is more than {tables.UNSTABLE_P90_OVER_MEDIAN}x the "
             "median: the median hides a slow tail; rerun with more iterations or find the noise.")
    sub.table(tables.unstable(df))
    sec.sub("Wrong results (wrong > 0)").table(tables.wrong_rows(df))
    sec.sub("Skipped, failed and timed-out points").table(tables.not_ok_rows(df))
    return doc


def _rehearsal_note(df: pd.DataFrame) -> str:
    """A sentence when rows ran with several ranks on one GPU (their times are not speed)."""
    from .. import rehearsal

    shared = rehearsal.shared_mask(df)
    if not shared.any():
        return ""
    most = int(pd.to_numeric(df.loc[shared, rehearsal.COLUMN], errors="coerce").max())
    return (f"{int(shared.sum())} of {len(df)} points ran with up to {most} ranks on one GPU. They prove "
            f"the results (wrong column) and the multi-rank code paths; their times and bandwidths are the "
            f"GPU time-sliced between processes and say nothing about speed (docs/rehearsal.md).")


def _training_section(doc: Document, df: pd.DataFrame) -> None:
    """Training-step strategies: where the step's time goes (only when such rows exist)."""
    from . import training

    table = training.overlap_table(df)
    if table.empty:
        return
    sec = doc.section("Training step: compute and communication")
    sec.text("Per op, one bar per strategy: compute (the step with communication removed), "
             "exposed communication (step - compute) and hidden communication (the rest of the "
             "communication time, which ran under compute). docs/families/training.md defines the columns.")
    fig = training.overlap_figure(df)
    sec.image(figure_png(fig) if fig is not None else None, "training step breakdown", "training.png")
    sec.table(table)


def write_report(run_dirs, out=None):
    """Load run folders and write the HTML report and its Markdown twin; return both paths.

    Default out: RUN/report.html for one run. ``commbench run`` may call this at the end.
    """
    from pathlib import Path

    from . import html, markdown
    from ...runfolder.reader import load_run

    runs = [load_run(d) for d in run_dirs]
    html_path = Path(out) if out is not None else runs[0].path / "report.html"
    doc = build_report(runs)
    return html.write(doc, html_path), markdown.write(doc, html_path.with_suffix(".md"))
