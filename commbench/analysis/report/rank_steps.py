"""Each rank's timed steps of a Case, split from its stored timeline (timeline/<case_id>.r<rank>.json)
the way the row was (measure/step_split.py), for the report's per-rank view
(sections/step_timelines.py).

A few Cases are shown per run: several ranks before one, then the largest exposed share of the
step (where communication costs most), chosen from the rows alone so that only the shown Cases'
files are read.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...errors import RunFolderError
from ...measure import step_split
from ...runfolder import step_timelines
from . import step_bars

MAX_CASES = 4


def candidates(results: pd.DataFrame, limit: int = MAX_CASES) -> list[str]:
    """Case ids of split rows worth a per-rank picture, best first."""
    rows = step_bars.split_rows(results) if "case_id" in results.columns else results.iloc[0:0]
    if rows.empty:
        return []
    ranks = pd.to_numeric(rows.get("world_size", pd.Series(1, index=rows.index)), errors="coerce").fillna(1)
    share = (rows["exposed_comm_us"] / rows["step_us"].where(rows["step_us"] > 0)).fillna(0)
    order = rows.assign(_many=ranks > 1, _share=share).sort_values(["_many", "_share"], ascending=False)
    return list(dict.fromkeys(order["case_id"].astype(str)))[:limit]


def rank_splits(run_dir: Path, case_id: str) -> dict[int, list[dict]]:
    """{rank: one split per timed step} of a Case ({} without stored timelines)."""
    out = {}
    for rank in step_timelines.ranks_of(run_dir, case_id):
        try:
            doc = step_timelines.read(run_dir, case_id, rank)
        except FileNotFoundError:
            continue
        out[rank] = step_split.split_steps(doc["intervals"], [tuple(s) for s in doc["steps"]])
    return out


def shown(run, limit: int = MAX_CASES) -> list[tuple[str, dict[int, list[dict]]]]:
    """(case id, per-rank splits) of the Cases of a run (runfolder.reader.Run) to draw; a damaged
    file leaves its Case out (the Warnings of `commbench trace` name it)."""
    out = []
    for cid in candidates(run.results, limit=len(run.results)):
        try:
            splits = rank_splits(run.path, cid)
        except RunFolderError:
            continue
        if any(splits.values()):
            out.append((cid, splits))
        if len(out) == limit:
            break
    return out


def rank_figure(splits: dict[int, list[dict]], title: str, slowest=None):
    """One cluster of bars per rank, one stacked bar per step."""
    ranks = sorted(r for r in splits if splits[r])
    most = max(len(splits[r]) for r in ranks)
    fig, ax = step_bars.plt.subplots(figsize=(min(step_bars.MAX_WIDTH_IN, max(6.0, 0.12 * most * len(ranks) + 2)),
                                              4.2))
    ticks = []
    for k, rank in enumerate(ranks):
        base = k * (most + 1)
        xs = [base + i for i in range(len(splits[rank]))]
        step_bars.draw_bars(ax, xs, splits[rank], width=0.8, legend=k == 0)
        ticks.append((base + (len(xs) - 1) / 2, f"rank {rank}" + (" (slowest)" if rank == slowest else "")))
    ax.set_xticks([t for t, _ in ticks])
    ax.set_xticklabels([lab for _, lab in ticks], fontsize=8)
    ax.set_ylabel("time per step (us)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
