"""Run a suite file as the commands do (the Suite loaded once, one Run), for tests that replace
the launcher (``commbench.launch.group.run_launch``) with a fake."""
from __future__ import annotations

from pathlib import Path

from commbench.launch.run import Run, RunOptions
from commbench.suite import load_suite


def run_suite_file(path, out: Path | None, **options) -> Path:
    return Run.execute(load_suite(path), out, RunOptions(**options))
