"""`compare --confirm N`: a regression stays only if it reproduces on this machine.

The NEW Cases the gate found worse are measured again here, N passes of the suite NEW ran cut down
to those Cases (each pass runs every one of them once, so a disturbance that comes and goes touches
them alike, not one Case's repeats), and judged again against BASE with the fresh runs as NEW. A
point whose fresh runs are worse by more than the gate stays failing ("confirmed": judged worse
again, or beyond its noise floor at the same significance, since the mirror test and the correction
over every point were passed by the first comparison and a handful of re-measured points cannot pass
them again); one they show unchanged, better or worse by the gate or less is "not reproduced" and no
longer fails; one that moved up by more within its noise stays for the gate to call inconclusive. A
point that cannot be measured again (its Case is not in NEW's suite, or its fresh row is not ok)
keeps its first verdict. docs/report.md, "compare --confirm".
"""
from __future__ import annotations

import dataclasses
import math
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


def check_confirm_out(out: Path | None) -> None:
    """--confirm-out must be a new or empty folder (its runs are repeat-1 ... repeat-N)."""
    if out is not None and Path(out).exists() and (not Path(out).is_dir() or any(Path(out).iterdir())):
        raise CommbenchError(f"--confirm-out {out} already exists and is not an empty folder: choose another "
                             "(the fresh runs go to DIR/repeat-1 ... repeat-N).")


def _norm(value) -> str:
    """A key value as text the way both sides agree on: empty (None, NaN) as "", a whole number as an
    integer whatever its type (a column with blanks reads 4096 as 4096.0)."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, (bool, str)) or not hasattr(value, "__float__"):
        return str(value)
    number = float(value)
    if number != number:
        return ""
    return str(int(number)) if number.is_integer() else repr(number)


def _key_columns() -> list[str]:
    from ..analysis.compare import DISAMBIGUATE, KEY, KEY_OPTIONAL

    return list(dict.fromkeys(KEY + KEY_OPTIONAL + DISAMBIGUATE))


def _rows_of(rows: pd.DataFrame, point: pd.Series) -> pd.DataFrame:
    """The rows of ``rows`` with the point's value in every key column both have."""
    hit = pd.Series(True, index=rows.index)
    for col in rows.columns.intersection(_key_columns()):
        if col in point.index:
            hit &= rows[col].map(_norm) == _norm(point[col])
    return rows[hit]


def _case_of(point: pd.Series, new_runs: list, by_id: dict, by_key: dict):
    """(the Case behind a point, or None and why). NEW's rows for the point give its case_id; when
    NEW's suite file no longer has that id (the file was edited), the one Case with the point's key."""
    ids = set()
    for run in new_runs:
        if "case_id" in run.results.columns:
            ids |= set(_rows_of(run.results, point)["case_id"].astype(str))
    known = sorted(i for i in ids if i in by_id)
    if len(known) > 1:   # twins compare pairs by case_id only: it cannot tell which of them moved
        return None, f"{len(known)} Cases of NEW share this point's key"
    if known:
        return by_id[known[0]], ""
    matches = by_key.get(tuple(_norm(point.get(c)) for c in CASE_KEY), [])
    if len(matches) == 1:
        return matches[0], ""
    return None, "no Case for it in NEW's suite" if not matches else f"{len(matches)} Cases of NEW's suite fit its key"


def cut_suite(suite, worse: pd.DataFrame, new_runs: list) -> tuple[object, dict]:
    """``suite`` cut down to the Cases of the ``worse`` points; {index label: why} of the points it
    cannot re-measure."""
    from ..suite.launches import group_launches

    by_id = {c.case_id: c for c in suite.cases}
    by_key: dict[tuple, list] = {}
    for c in suite.cases:
        key = tuple(_norm(v) for v in (c.family, c.op, c.backend, c.variant, c.dtype, c.size_bytes, c.ranks))
        by_key.setdefault(key, []).append(c)
    kept, lost = {}, {}
    for label, point in worse.iterrows():
        case, why = _case_of(point, new_runs, by_id, by_key)
        if case is None:
            lost[label] = why
        else:
            kept[case.case_id] = case
    cases = [c for c in suite.cases if c.case_id in kept]   # the suite's own order
    return dataclasses.replace(suite, cases=cases, launches=group_launches(cases)), lost


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def reproduced(row: pd.Series, fail_above_pct: float, alpha: float) -> str:
    """What the fresh runs say of a point the first comparison found worse: CONFIRMED when it is
    worse again by more than the gate (judged, or: beyond its noise floor at the same significance:
    the mirror test and the correction over every point were passed by the first comparison, and a
    few re-measured points cannot pass them again), NOT_REPRODUCED when it moved up by the gate or
    less, else UNSURE."""
    change, floor, p = _number(row.get("change_pct")), _number(row.get("noise_pct")), _number(row.get("p_adjusted"))
    if row["verdict"] == "worse" and change > fail_above_pct:
        return CONFIRMED
    if row["verdict"] in ("unchanged", "better") or not change > fail_above_pct:
        return NOT_REPRODUCED
    if change >= floor and p < alpha:   # NaN fails both
        return CONFIRMED
    return UNSURE


def rejudge(points: pd.DataFrame, worse: pd.DataFrame, fresh: pd.DataFrame, repeats: int,
            fail_above_pct: float, lost: dict, alpha: float = 0.05) -> pd.DataFrame:
    """``points`` with each worse point judged again from ``fresh`` (BASE against the fresh runs)."""
    out = points.copy()
    out["confirm"] = ""
    for label, point in worse.iterrows():
        first = f"first run {point['change_pct']:+.1f} %" if pd.notna(point.get("change_pct")) else "first run worse"
        match = _rows_of(fresh, point) if label not in lost else fresh.iloc[0:0]
        if len(match) != 1 or match.iloc[0]["verdict"] in ("missing", "not comparable", "new"):
            why = lost.get(label) or (f"its re-run: {match.iloc[0]['why']}" if len(match) == 1 else
                                      "not in the re-runs" if match.empty else "several re-run rows share its key")
            out.loc[label, "confirm"] = NOT_REMEASURED
            out.loc[label, "why"] = f"{point['why']}; {NOT_REMEASURED} ({why}): its first verdict stands"
            continue
        row = match.iloc[0]
        state = reproduced(row, fail_above_pct, alpha)
        for col in fresh.columns.intersection(out.columns):
            out.at[label, col] = row[col]
        if state == CONFIRMED:
            out.loc[label, "verdict"] = "worse"   # the gate fails it, mirror test or not
        out.loc[label, "confirm"] = state
        tail = f": {row['why']}" if _norm(row["why"]) else ""
        out.loc[label, "why"] = f"{state} by {repeats} re-run(s) on this machine ({first}){tail}"
    return out


def confirm(points: pd.DataFrame, worse: pd.DataFrame, base_runs: list, new_runs: list,
            settings, fail_above_pct: float, repeats: int, out: Path | None, quiet: bool) -> Confirmation:
    """Re-measure the ``worse`` points' Cases ``repeats`` times into ``out`` and judge them again
    (``base_runs``, ``new_runs``: the runs compare loaded, each side's folders expanded)."""
    from ..analysis.compare import compare_runs
    from ..analysis.runsets import load_side
    from ..launch.repeat import run_repeats
    from .options import load
    from .start import execute

    if worse.empty:
        return Confirmation(points, None, "confirm: no point was worse beyond the gate; nothing re-measured")
    folders = [run.path for run in new_runs]
    overrides = dict(new_runs[0].meta.get("overrides") or {})
    suite = load(suite_file_of(folders), overrides, None, None)
    cut, lost = cut_suite(suite, worse, new_runs)
    if not cut.cases:
        return Confirmation(rejudge(points, worse, pd.DataFrame(columns=points.columns), repeats,
                                    fail_above_pct, lost, settings.alpha), None,
                            f"confirm: none of the {len(worse)} worse point(s) has a Case in {folders[0]}/suite.yaml")

    def run_one(out_dir, again, before_finish=None):   # the fresh runs need rows only: no plots or report
        return execute(cut, out_dir, resume=again, overrides=overrides, quiet=quiet, finish=_rows_only,
                       before_finish=before_finish)

    dirs = run_repeats(cut, out, repeats, resume=False, run_one=run_one)
    fresh = compare_runs(base_runs, load_side(dirs), settings)
    judged = rejudge(points, worse, fresh, repeats, fail_above_pct, lost, settings.alpha)
    counts = judged.loc[worse.index, "confirm"].value_counts()
    told = ", ".join(f"{int(counts.get(s, 0))} {s}" for s in (CONFIRMED, NOT_REPRODUCED, UNSURE, NOT_REMEASURED)
                     if counts.get(s, 0))
    folder = Path(dirs[0]).parent
    return Confirmation(judged, folder, f"confirm: {len(worse)} worse point(s) re-measured {repeats} time(s) "
                                        f"on this machine ({len(cut.cases)} Case(s), {folder}): {told}")


def _rows_only(folder, console) -> None:
    """A confirming run's finish: its rows are all compare reads."""
