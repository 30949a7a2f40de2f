"""One acceptance verdict: a check, pass or fail, what was measured against what was expected."""
from __future__ import annotations

from dataclasses import dataclass, field

# What a check may be about (``Verdict.level``): a node (host), one GPU, a rank, a link between
# two nodes (a pair judged together), a node's link to the fabric (the search's "network").
LEVELS = ("node", "gpu", "rank", "link", "network")


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
    # What the check names, for machines (accept --json): one of LEVELS and the names at that level
    # (a host; 'node03 gpu 1'; a rank's number; a link as its two hosts 'a,b'); "" and () for rules.
    level: str = ""
    names: tuple[str, ...] = ()
    # The numbers behind measured and expected, unrounded: value, threshold, baseline, change_pct,
    # rows, ... (docs/accept.md, "Verdicts as JSON"); empty where the check has none.
    numbers: dict = field(default_factory=dict)
