"""`--resume` continues a run folder only with the settings it was started with: the same suite
content, the same `--set` overrides and the same `--only` benchmarks. Anything else would mix
rows measured two ways in one results.csv (e.g. 15 rows at 100 iterations, 137 at 10), so it is
refused with exit status 2 and the differences named, unless `--force` says to mix; run.json then
keeps both settings (``forced_resumes``, ``earlier_overrides`` and a copy of the earlier suite)."""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from ..errors import CommbenchError
from ..suite import ONLY_KEY

SUITE_COPY = "suite.yaml"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _suite_difference(stored: Path, current: Path) -> str | None:
    if not stored.is_file():
        return None   # a folder from before suite copies were kept: run.json's record decides
    old, new = stored.read_bytes(), Path(current).read_bytes()
    if old == new:
        return None
    old_lines = old.decode(errors="replace").splitlines()
    new_lines = new.decode(errors="replace").splitlines()
    for i, (a, b) in enumerate(zip(old_lines + [""] * len(new_lines), new_lines + [""] * len(old_lines))):
        if a != b:
            return (f"the suite file {current} differs from the run's copy {stored.name} "
                    f"(first at line {i + 1}: {a.strip()!r} then, {b.strip()!r} now)")
    return f"the suite file {current} differs from the run's copy {stored.name}"


def _fmt(values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items())) or "none"


def _recorded_suite_difference(previous: dict, suite_path: Path, suite_name: str | None) -> str | None:
    """Without a suite copy (a folder from before copies were kept): run.json's suite hash, else its
    suite name, against this call's suite."""
    sha = previous.get("suite_sha256")
    if isinstance(sha, str) and sha and sha != file_sha256(suite_path):
        return f"the suite file {suite_path} differs from the one run.json records (sha256 {sha[:12]}...)"
    name = previous.get("suite")
    if suite_name is not None and isinstance(name, str) and name != suite_name:
        return f"run.json records suite {name!r}, this is suite {suite_name!r}"
    return None


def differences(folder_path: Path, previous: dict, suite_path: Path, overrides: dict | None,
                suite_name: str | None = None) -> list[str]:
    """What differs between the run folder's settings and this call's (empty: the same)."""
    out = []
    stored = Path(folder_path) / SUITE_COPY
    if stored.is_file():
        suite_diff = _suite_difference(stored, suite_path)
    else:
        suite_diff = _recorded_suite_difference(previous, suite_path, suite_name)
    if suite_diff:
        out.append(suite_diff)
    before = dict(previous.get("overrides") or {})
    now = dict(overrides or {})
    only_before, only_now = before.pop(ONLY_KEY, None), now.pop(ONLY_KEY, None)
    if before != now:
        gone = {k: v for k, v in before.items() if k not in now}
        added = {k: v for k, v in now.items() if k not in before}
        changed = {k: (before[k], now[k]) for k in before if k in now and before[k] != now[k]}
        parts = []
        if gone:
            parts.append(f"given before and not now: --set {_fmt(gone)}")
        if added:
            parts.append(f"new now: --set {_fmt(added)}")
        if changed:
            parts.append("changed: " + ", ".join(f"--set {k}={a} before, {b} now"
                                                 for k, (a, b) in sorted(changed.items())))
        out.append("the --set overrides differ (" + "; ".join(parts) + ")")
    if sorted(only_before or []) != sorted(only_now or []):
        out.append(f"--only differs ({', '.join(only_before) if only_before else 'every benchmark'} before, "
                   f"{', '.join(only_now) if only_now else 'every benchmark'} now)")
    return out


def guard(folder_path: Path, previous: dict, suite_path: Path, overrides: dict | None, force: bool,
          started: str, suite_name: str | None = None) -> dict | None:
    """Refuse a mixing --resume (CommbenchError, exit 2) or, with ``force``, return the record for
    run.json's ``forced_resumes`` (after keeping the earlier suite copy beside the new one)."""
    diffs = differences(folder_path, previous, suite_path, overrides, suite_name)
    if not diffs:
        return None
    if not force:
        raise CommbenchError(
            f"--resume of {folder_path} would mix settings: " + "; ".join(diffs) + ". Resume with "
            "the settings the run was started with, choose another --out, or pass --force to mix "
            "them (run.json then records both).")
    stored = Path(folder_path) / SUITE_COPY
    record = {"utc": started, "differences": diffs, "earlier_overrides": previous.get("overrides", {})}
    if stored.is_file() and _suite_difference(stored, suite_path):
        n = len(previous.get("forced_resumes", [])) + 1
        keep = Path(folder_path) / f"suite.earlier-{n}.yaml"
        shutil.copyfile(stored, keep)
        record.update(earlier_suite=keep.name, earlier_suite_sha256=file_sha256(stored))
    return record

