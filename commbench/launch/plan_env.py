"""Secret values stay out of plan.json: the plan stores a secret-looking variable of a Case or a
launch as ``<withheld>``, and a rank rebuilding its Cases from the plan takes the real value from
its own environment, which the launch set from the suite in memory (never written to disk).

A Case's id is a hash over its env values, so the rebuilt Case must hash to the id the plan
stored under; a rank whose environment lacks the value refuses the Case by name."""
from __future__ import annotations

from typing import Iterable, Mapping

from ..errors import CommbenchError
from ..families.base import Case
from ..sysinfo.machine import WITHHELD, redact_env


def stored_env(env: Iterable[tuple[str, str]]) -> list[list[str]]:
    """A Case's env pairs as plan.json keeps them: secret-looking values withheld."""
    return [[k, v] for k, v in redact_env(dict(env)).items()]


def stored_case(case: Case) -> dict:
    """A Case as plan.json keeps it (Case.to_json, its secret env values withheld)."""
    d = case.to_json()
    d["env"] = stored_env(case.env)
    return d


def rebuilt_case(entry: Mapping, environ: Mapping[str, str]) -> Case:
    """The Case of one plan.json entry, withheld env values taken from ``environ`` (the rank's)."""
    d = dict(entry["case"])
    d["env"] = [[k, environ.get(k, v) if v == WITHHELD else v] for k, v in d["env"]]
    case = Case.from_json(d)
    if case.case_id != entry["case_id"]:
        withheld = [k for k, v in entry["case"]["env"] if v == WITHHELD]
        raise CommbenchError(f"Case {entry['case_id']}: plan.json withholds {', '.join(withheld) or 'no'} "
                             f"variable(s) and this rank's environment does not give them the values the "
                             f"Case was planned with (the launch passes them; run through `commbench run`)")
    return case
