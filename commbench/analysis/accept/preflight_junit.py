"""An acceptance stopped by its preflight (launch/preflight.py) as verdicts and JUnit XML: one
testcase per check held against the node (GPUs, GPU model, free memory), the failed ones with the
sentence that stopped it ("node has 1 GPU, the suite expects 8"), so CI shows why nothing ran."""
from __future__ import annotations

from .junit import junit_xml
from .outcome import Verdict


def preflight_verdicts(pre) -> list[Verdict]:
    """The preflight's checks (``launch.preflight.Preflight``) as node verdicts."""
    return [Verdict(check=f"preflight: {c.name}", kind="node", passed=c.passed, measured=c.measured,
                    expected=c.expected, reason=c.reason, metric=c.name)
            for c in pre.checks]


def preflight_junit_xml(pre, suite_name: str) -> str:
    """JUnit XML of a preflight: its checks, and its notes as the suite's system-out lines."""
    return junit_xml(preflight_verdicts(pre), suite_name, list(pre.notes))
