"""Which hosts a failed launch ran on, and which one the launcher lost: named in the rows' reason,
so a dead or unreachable node shows in results.csv and accept, not only in the launch log."""
from __future__ import annotations

import json
import re
from pathlib import Path

# How Open MPI (orte and prrte) and ssh name a node they could not start or lost contact with.
_LOST_PATTERNS = (r"Remote host:\s+{h}\b", r"Remote daemon:.* on node {h}\b", r"connect to host {h}\b",
                  r"resolve hostname {h}\b")


def hosts_the_launcher_lost(log: Path, hosts: list[str]) -> list[str]:
    """The hosts that the last attempt's launcher output (after its '=== launch' line) names."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    last = text[text.rfind("=== launch"):]
    return [h for h in hosts if any(re.search(p.format(h=re.escape(h)), last) for p in _LOST_PATTERNS)]


def on_hosts(run_dir: Path, launch) -> str:
    """' on hosts a,b (lost b)' for a failed launch's reason: the placement's hosts, else those its
    ranks reported at start-up; '' when neither is known."""
    hosts = list(launch.hosts)
    if not hosts:
        try:
            reported = json.loads((run_dir / "logs" / f"launch-{launch.launch_id}.hosts.json").read_text())
            hosts = sorted(set(reported["hosts"]))
        except (OSError, ValueError, KeyError, TypeError):
            return ""
    where = f" on host{'s' if len(hosts) > 1 else ''} {','.join(hosts)}"
    lost = hosts_the_launcher_lost(run_dir / "logs" / f"launch-{launch.launch_id}.log", hosts)
    return f"{where} (lost {','.join(lost)})" if lost and len(hosts) > 1 else where
