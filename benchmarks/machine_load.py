"""The machine's load as `uptime` prints it, for a benchmark's report (times on a busy machine are
read with that beside them)."""
from __future__ import annotations

import subprocess


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "(uptime unavailable)"
