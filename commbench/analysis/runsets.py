"""Several run folders as one side of a comparison: a folder of repeats (`run --repeat N` writes
OUT/repeat-1 ... OUT/repeat-N) or run folders named one by one (`compare A1 A2 vs B1 B2`)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import click

from commbench.errors import CommbenchError
from commbench.runfolder.reader import Run, is_run_folder, load_run

REPEAT_PREFIX = "repeat-"
SEPARATOR = "vs"


def repeat_dirs(path: Path) -> list[Path]:
    """The run folders of a repeat set, in repeat order ([] when ``path`` is not one)."""
    path = Path(path)
    if not path.is_dir() or is_run_folder(path):
        return []
    found = []
    for child in path.iterdir():
        m = re.fullmatch(rf"{REPEAT_PREFIX}(\d+)", child.name)
        if m and is_run_folder(child):
            found.append((int(m.group(1)), child))
    return [p for _, p in sorted(found)]


def expand(paths) -> list[Path]:
    """Run folders named by ``paths``: each a run folder or a repeat set. A folder named twice
    (directly or through its repeat set) is counted twice: a warning says so."""
    out = []
    for p in map(Path, paths):
        out += repeat_dirs(p) or [p]
    seen: dict[str, Path] = {}
    for p in out:
        key = os.path.realpath(p)
        if key in seen:
            _warn(f"{p} is counted twice (also as {seen[key]}): its rows weigh double")
        seen.setdefault(key, p)
    return out


def load_side(paths) -> list[Run]:
    """Load every run folder of one side (a RunFolderError names a path that is not one); warn
    when they are not repeats of one suite or one run was copied into two folders."""
    runs = [load_run(p) for p in expand(paths)]
    for warning in side_warnings(runs):
        _warn(warning)
    return runs


def side_warnings(runs: list[Run]) -> list[str]:
    """What makes a side's runs not plain repeats of one suite: runs of several suites, and copies
    (two folders holding one run: the same suite started at the same second on the same host)."""
    out = []
    suites = sorted({str(r.meta.get("suite")) for r in runs if r.meta.get("suite") is not None})
    if len(suites) > 1:
        out.append(f"these run folders hold {len(suites)} different suites ({', '.join(suites[:5])}) "
                   f"but are counted as repeats of one: {', '.join(str(r.path) for r in runs[:6])}")
    first: dict[tuple, Path] = {}
    for r in runs:
        key = tuple(str(r.meta.get(k)) for k in ("suite", "started_utc", "hostname"))
        if r.meta.get("started_utc") is None:
            continue   # nothing to tell a copy by
        if key in first and os.path.realpath(first[key]) != os.path.realpath(r.path):
            out.append(f"{r.path} holds the same run as {first[key]} (suite {key[0]}, started {key[1]}): "
                       f"a copied repeat is counted twice")
        first.setdefault(key, r.path)
    return out


def _warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def split_sides(args) -> tuple[list[Path], list[Path]]:
    """`compare BASE NEW` or `compare B1 B2 ... vs N1 N2 ...` -> (base paths, new paths)."""
    args = [Path(a) for a in args]
    marks = [i for i, a in enumerate(args) if str(a) == SEPARATOR]
    if not marks:
        if len(args) != 2:
            raise CommbenchError(
                f"compare takes BASE NEW, or several run folders per side separated by "
                f"'{SEPARATOR}' (compare B1 B2 {SEPARATOR} N1 N2); got {len(args)} path(s) and no "
                f"'{SEPARATOR}'. (A folder literally named '{SEPARATOR}' is ./{SEPARATOR}.)")
        return [args[0]], [args[1]]
    if len(marks) > 1 or marks[0] == 0 or marks[0] == len(args) - 1:
        raise CommbenchError(f"compare: put '{SEPARATOR}' once, between the BASE and the NEW run folders "
                             f"(compare B1 B2 {SEPARATOR} N1 N2).")
    return args[:marks[0]], args[marks[0] + 1:]


@dataclass
class LabelledRun(Run):
    """A Run shown under another name than its folder's (``shown``)."""

    shown: str = ""

    @property
    def label(self) -> str:
        return self.shown or self.path.name


def shown_labels(runs: list[Run]) -> list[str]:
    """A name per run that tells the runs apart: a repeat is named with its set
    (``<set folder>/repeat-2``), so two sets in one report are not both repeat-1..N; any other
    clash takes parent folders until the names differ."""
    def name(run: Run, depth: int) -> str:
        parts = Path(run.path).resolve().parts
        return "/".join(parts[-depth:]) if depth < len(parts) else str(Path(run.path).resolve())

    depths = [2 if re.fullmatch(rf"{REPEAT_PREFIX}\d+", Path(r.path).name) else 1 for r in runs]
    for _ in range(64):   # bounded: a path has few parts
        labels = [name(r, d) for r, d in zip(runs, depths)]
        clashing = {lab for lab in labels if labels.count(lab) > 1}
        if not clashing:
            return labels
        depths = [d + 1 if lab in clashing else d for lab, d in zip(labels, depths)]
    return [str(r.path) for r in runs]


def labelled(runs: list[Run]) -> list[Run]:
    """The runs, each under its shown_labels name (the same objects when no name changes)."""
    out = []
    for run, label in zip(runs, shown_labels(runs)):
        out.append(run if label == run.label else
                   LabelledRun(path=run.path, results=run.results, samples=run.samples, meta=run.meta,
                               shown=label))
    return out


def one_folder(paths) -> Path | None:
    """The folder a report of ``paths`` belongs in: the run folder or repeat set when exactly one
    is named, else None (several folders: the report has no one home)."""
    paths = [Path(p) for p in paths]
    if len(paths) == 1 and (is_run_folder(paths[0]) or repeat_dirs(paths[0])):
        return paths[0]
    return None


def side_label(runs: list[Run]) -> str:
    if len(runs) == 1:
        return runs[0].label
    parents = {r.path.parent for r in runs}
    if len(parents) == 1 and all(r.path.name.startswith(REPEAT_PREFIX) for r in runs):
        return f"{runs[0].path.parent.name} ({len(runs)} repeats)"
    return f"{runs[0].label} + {len(runs) - 1} more"
