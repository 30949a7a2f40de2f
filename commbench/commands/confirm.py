"""`compare --confirm N`: a regression stays only if it reproduces on this machine.

The NEW Cases the gate found worse are measured again here, N passes of the suite NEW ran cut down
to those Cases (each pass runs every one of them once, so a disturbance that comes and goes touches
them alike, not one Case's repeats), and judged again against BASE with the fresh runs as NEW.
A point whose fresh runs are worse by more than the gate stays failing ("confirmed"); one they show
unchanged, better or worse by less is "not reproduced" and no longer fails; one they cannot tell
stays for the gate to call inconclusive. A point that cannot be measured again (its Case is not in
NEW's suite, or its fresh row is not ok) keeps its first verdict. docs/report.md, "compare --confirm".
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import CommbenchError

CONFIRMED, NOT_REPRODUCED, UNSURE, NOT_REMEASURED = ("confirmed", "not reproduced", "can't tell",
                                                     "not re-measured")
CASE_KEY = ("family", "op", "backend", "variant", "dtype", "size_bytes", "world_size")


@dataclass
class Confirmation:
    """The points after re-measuring (``confirm`` column filled for the ones re-measured), the folder
    of the fresh runs, and a sentence for the terminal."""

    points: pd.DataFrame
    folder: Path | None
    sentence: str


def suite_file_of(new_paths: list[Path]) -> Path:
    """The suite NEW ran (its copy in NEW's first run folder); exit 2 when NEW has none (an
    imported nccl-tests folder), before anything is compared."""
    first = Path(new_paths[0])
    copy = first / "suite.yaml"
    if not copy.is_file():
        raise CommbenchError(f"--confirm re-measures NEW's Cases from the suite NEW ran, and {copy} is not "
                             "there (an imported or hand-made run folder): run NEW with `commbench run`, or "
                             "drop --confirm.")
    return copy


def _cells(col: pd.Series) -> pd.Series:
    """A key column as text, an empty cell (None or NaN) as ""."""
    return col.astype(object).where(col.notna(), "").astype(str)


def _cell(value) -> str:
    return "" if value is None or value != value else str(value)


def _case_of(point: pd.Series, new_runs: list, by_id: dict, by_key: dict):
    """The Case behind a point: NEW's row for it gives the case_id; when NEW's suite file no longer
    has that id (the file was edited), the one Case with the point's key."""
    from ..analysis.compare import DISAMBIGUATE, KEY, KEY_OPTIONAL

    for run in new_runs:   # every key column the point has (in_place, timing...), not CASE_KEY alone
        rows = run.results
        hit = pd.Series(True, index=rows.index)
        for col in dict.fromkeys(KEY + KEY_OPTIONAL + DISAMBIGUATE):
            if col in rows.columns and col in point.index:
                hit &= _cells(rows[col]) == _cell(point[col])
        for cid in rows.loc[hit, "case_id"].astype(str) if "case_id" in rows.columns else []:
            if cid in by_id:
                return by_id[cid]
    matches = by_key.get(tuple(_cell(point.get(c)) for c in CASE_KEY), [])
    return matches[0] if len(matches) == 1 else None


def cut_suite(suite, worse: pd.DataFrame, new_runs: list) -> tuple[object, list]:
    """``suite`` cut down to the Cases of the ``worse`` points; the index labels of those it has no
    Case for."""
    from ..suite.launches import group_launches

    by_id = {c.case_id: c for c in suite.cases}
    by_key: dict[tuple, list] = {}
    for c in suite.cases:
        key = tuple(str(v) for v in (c.family, c.op, c.backend, c.variant, c.dtype, c.size_bytes, c.ranks))
        by_key.setdefault(key, []).append(c)
    kept, lost = {}, []
    for label, point in worse.iterrows():
        case = _case_of(point, new_runs, by_id, by_key)
        if case is None:
            lost.append(label)
        else:
            kept[case.case_id] = case
    cases = [c for c in suite.cases if c.case_id in kept]   # the suite's own order
    return dataclasses.replace(suite, cases=cases, launches=group_launches(cases)), lost


def _same_point(fresh: pd.DataFrame, point: pd.Series) -> pd.DataFrame:
    from ..analysis.compare import DISAMBIGUATE, KEY, KEY_OPTIONAL

    hit = pd.Series(True, index=fresh.index)
    for col in fresh.columns.intersection(list(dict.fromkeys(KEY + KEY_OPTIONAL + DISAMBIGUATE))):
        if col in point.index:
            hit &= _cells(fresh[col]) == _cell(point[col])
    return fresh[hit]


def rejudge(points: pd.DataFrame, worse: pd.DataFrame, fresh: pd.DataFrame, repeats: int,
            fail_above_pct: float, lost: list) -> pd.DataFrame:
    """``points`` with each worse point judged again from ``fresh`` (BASE against the fresh runs)."""
    out = points.copy()
    out["confirm"] = ""
    for label, point in worse.iterrows():
        first = f"first run {point['change_pct']:+.1f} %" if pd.notna(point.get("change_pct")) else "first run worse"
        match = _same_point(fresh, point) if label not in lost else fresh.iloc[0:0]
        if len(match) != 1 or match.iloc[0]["verdict"] in ("missing", "not comparable", "new"):
            why = "no Case for it in NEW's suite" if label in lost else (
                f"its re-run: {match.iloc[0]['why']}" if len(match) == 1 else "not in the re-runs")
            out.loc[label, "confirm"] = NOT_REMEASURED
            out.loc[label, "why"] = f"{point['why']}; {NOT_REMEASURED} ({why}): its first verdict stands"
            continue
        row = match.iloc[0]
        ratio = pd.to_numeric(pd.Series([row["time_ratio"]]), errors="coerce").iloc[0]
        if row["verdict"] == "worse" and ratio > 1.0 + fail_above_pct / 100.0:
            state = CONFIRMED
        elif row["verdict"] == UNSURE:
            state = UNSURE
        else:
            state = NOT_REPRODUCED
        for col in fresh.columns.intersection(out.columns):
            out.at[label, col] = row[col]
        out.loc[label, "confirm"] = state
        tail = f": {row['why']}" if _cell(row["why"]) else ""
        out.loc[label, "why"] = f"{state} by {repeats} re-run(s) on this machine ({first}){tail}"
    return out


def confirm(points: pd.DataFrame, worse: pd.DataFrame, base_runs: list, new_paths: list[Path],
            settings, fail_above_pct: float, repeats: int, out: Path | None, quiet: bool) -> Confirmation:
    """Re-measure the ``worse`` points' Cases ``repeats`` times into ``out`` and judge them again."""
    from ..analysis.compare import compare_runs
    from ..analysis.runsets import expand, load_side
    from ..launch.repeat import run_repeats
    from ..runfolder.reader import load_run
    from .options import load
    from .start import execute

    if worse.empty:
        return Confirmation(points, None, "confirm: no point was worse beyond the gate; nothing re-measured")
    folders = expand(new_paths)
    new_runs = [load_run(p) for p in folders]
    overrides = dict(new_runs[0].meta.get("overrides") or {})
    suite = load(suite_file_of(folders), overrides, None, None)
    cut, lost = cut_suite(suite, worse, new_runs)
    if not cut.cases:
        return Confirmation(rejudge(points, worse, pd.DataFrame(columns=points.columns), repeats,
                                    fail_above_pct, lost), None,
                            f"confirm: none of the {len(worse)} worse point(s) has a Case in {folders[0]}/suite.yaml")

    def run_one(out_dir, again, before_finish=None):   # the fresh runs need rows only: no plots or report
        return execute(cut, out_dir, resume=again, overrides=overrides, quiet=quiet, finish=_rows_only,
                       before_finish=before_finish)

    dirs = run_repeats(cut, out, repeats, resume=False, run_one=run_one)
    fresh = compare_runs(base_runs, load_side(dirs), settings)
    judged = rejudge(points, worse, fresh, repeats, fail_above_pct, lost)
    counts = judged.loc[worse.index, "confirm"].value_counts()
    told = ", ".join(f"{int(counts.get(s, 0))} {s}" for s in (CONFIRMED, NOT_REPRODUCED, UNSURE, NOT_REMEASURED)
                     if counts.get(s, 0))
    folder = Path(dirs[0]).parent
    return Confirmation(judged, folder, f"confirm: {len(worse)} worse point(s) re-measured {repeats} time(s) "
                                        f"on this machine ({len(cut.cases)} Case(s), {folder}): {told}")


def _rows_only(folder, console) -> None:
    """A confirming run's finish: its rows are all compare reads."""
