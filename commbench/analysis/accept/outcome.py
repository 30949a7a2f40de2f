"""One acceptance verdict: a check, pass or fail, what was measured against what was expected."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Verdict:
    check: str  # rule name, or 'row ...' / 'node ...' for built-in checks
    kind: str  # rule | row | node
    passed: bool
    measured: str
    expected: str
    reason: str
    metric: str = ""   # what measured and expected are: min(busbw_gbps), status and wrong, ...
    unit: str = ""     # the unit of bare numbers in measured and expected (GB/s, us); else ""
