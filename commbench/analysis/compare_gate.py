"""`compare --fail-above`: the gate's outcome from the points' verdicts, and `compare --json`.

The gate never passes on nothing: a point it cannot tell that moved up by more than the gate's
percentage (or every point it cannot tell, when it could judge none) makes it inconclusive, exit
status 3, unless --allow-inconclusive asks for the old pass (docs/report.md, README "Exit status")."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pandas as pd

from .compare import CANT_TELL, VERDICTS, failing_points
from .compare_rule import MOST_REPEATS, legend

EXIT_OK, EXIT_REGRESSION, EXIT_INCONCLUSIVE = 0, 1, 3
JSON_SCHEMA = "commbench.compare/1"
JUDGED = ("better", "worse", "unchanged")


@dataclass
class Gate:
    """exit_status 0 pass, 1 fail, 3 inconclusive; ``failing`` and ``unsure`` the points behind it."""

    status: str
    exit_status: int
    sentence: str
    failing: pd.DataFrame = field(default_factory=pd.DataFrame)
    unsure: pd.DataFrame = field(default_factory=pd.DataFrame)


def _repeats_sentence(unsure: pd.DataFrame) -> str:
    need = pd.to_numeric(unsure["repeats_to_tell"], errors="coerce")
    finite = need[need.apply(math.isfinite)] if len(need) else need
    if len(finite) == len(unsure) and len(finite):
        return f"{int(finite.max())} repeats would tell (run --repeat {int(finite.max())} on both sides)"
    if len(finite):
        return (f"{int(finite.max())} repeats would tell {len(finite)} of them (run --repeat "
                f"{int(finite.max())} on both sides); {len(unsure) - len(finite)} need more than "
                f"{MOST_REPEATS}: find their noise or raise --threshold")
    return f"repeats will not tell them (more than {MOST_REPEATS} needed): find their noise or raise --threshold"


def gate(points: pd.DataFrame, fail_above_pct: float, allow_inconclusive: bool = False) -> Gate:
    """The gate's outcome (README, "Exit status")."""
    bad = failing_points(points, fail_above_pct)
    if len(bad):
        return Gate("fail", EXIT_REGRESSION,
                    f"FAIL: {len(bad)} point(s) worse beyond their noise by more than {fail_above_pct:g}%, "
                    "or missing or not comparable in NEW", failing=bad)
    verdicts = points["verdict"] if len(points) else pd.Series([], dtype=str)
    cant = points[verdicts == CANT_TELL] if len(points) else points
    judged = int(verdicts.isin(JUDGED).sum())
    if judged + len(cant) == 0:
        return Gate("fail", EXIT_REGRESSION, "FAIL: nothing comparable: NEW measured none of BASE's points")
    change = pd.to_numeric(cant["change_pct"], errors="coerce") if len(cant) else pd.Series([], dtype=float)
    unsure = cant if judged == 0 else cant[(change > fail_above_pct) | change.isna()]
    if len(unsure) and not allow_inconclusive:
        return Gate("inconclusive", EXIT_INCONCLUSIVE,
                    f"INCONCLUSIVE: {len(unsure)} point(s) can't tell (moved up by more than "
                    f"{fail_above_pct:g}% within their noise{', and no point could be judged' if not judged else ''}); "
                    f"{_repeats_sentence(unsure)}", unsure=unsure)
    tail = ""
    if len(cant):
        tail = (f"; {len(cant)} point(s) {CANT_TELL} (listed above)"
                + (" and --allow-inconclusive lets them pass" if len(unsure) else
                   ": none moved up by more than the gate"))
    return Gate("pass", EXIT_OK, f"PASS: {judged + len(cant)} point(s) compared, none worse by more than "
                                 f"{fail_above_pct:g}%" + tail, unsure=unsure)


def _clean(value):
    """JSON has no NaN or infinity: null (the *_shown strings say "> 900%" or ">10")."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):   # numpy scalars
        return _clean(value.item())
    return value


def json_document(points: pd.DataFrame, per_op: pd.DataFrame, settings, labels: tuple[str, str],
                  paths: tuple[list, list], outcome: Gate | None, fail_above_pct: float | None,
                  allow_inconclusive: bool, warnings: list[str], extra: dict | None = None) -> str:
    """The comparison as JSON (schema in docs/report.md, "compare --json"); ``extra``: more top-level
    keys (`--confirm`'s outcome)."""
    tested = int(points["p_value"].notna().sum()) if "p_value" in points else 0
    table = points.copy()
    if len(table):
        table["repeats_shown"] = [_repeats_shown(v) for v in table["repeats_to_tell"]]
        table["gate"] = "pass" if outcome is not None else None
        if outcome is not None:
            if outcome.status == "inconclusive":
                table.loc[outcome.unsure.index, "gate"] = "inconclusive"
            table.loc[outcome.failing.index, "gate"] = "fail"
        numeric = table.select_dtypes("number").columns
        table[numeric] = table[numeric].replace([math.inf, -math.inf], math.nan)
    counts = {v: int((points["verdict"] == v).sum()) if len(points) else 0 for v in VERDICTS}
    doc = {
        "schema": JSON_SCHEMA,
        "base": {"label": labels[0], "runs": [str(p) for p in paths[0]]},
        "new": {"label": labels[1], "runs": [str(p) for p in paths[1]]},
        "settings": {"threshold_pct": settings.threshold_pct, "alpha": settings.alpha,
                     "correction": settings.correction, "fail_above_pct": fail_above_pct,
                     "allow_inconclusive": allow_inconclusive},
        "rule": legend(settings.threshold_pct, settings.alpha, settings.correction, tested),
        "counts": {"points": len(points), **counts},
        "per_op": [{k: _clean(v) for k, v in r.items()} for r in per_op.to_dict("records")],
        "gate": None if outcome is None else {"status": outcome.status, "sentence": outcome.sentence,
                                              "failing": len(outcome.failing), "inconclusive": len(outcome.unsure)},
        "exit_status": EXIT_OK if outcome is None else outcome.exit_status,
        "warnings": list(warnings),
        **(extra or {}),
    }
    head = json.dumps(doc, indent=1, allow_nan=False)
    rows = table.to_json(orient="records", double_precision=10) if len(table) else "[]"
    return head[:-2] + ',\n "points": ' + rows + "\n}"   # pandas writes the many rows at C speed


def _repeats_shown(value) -> str:
    v = float(value) if value is not None else math.nan
    return "" if math.isnan(v) else (f">{MOST_REPEATS}" if math.isinf(v) else str(int(v)))
