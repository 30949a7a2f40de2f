"""What a run folder must look like before `--resume` writes into it, and what run.json never holds.

`--resume` continues a folder commbench wrote: its run.json is a JSON object naming its ``suite``
(with a ``schema_version`` this commbench reads, where it has one), and the folder keeps its lock
file, its suite copy, its logs/ or its results (folders written before lock files and suite copies). Anything
else (a home folder, a folder holding ``passwd``, a folder another tool wrote) is refused with
exit status 2 before a byte is written to it: resuming means appending rows and logs there.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import RunFolderError
from . import files
from .check import check_meta
from .lock import LOCK_NAME

SUITE_COPY = "suite.yaml"
# at least one: a folder commbench's run opened (older runs: only their results)
MARKERS = (LOCK_NAME, SUITE_COPY, "logs", "results.jsonl", "results.csv")


def recognise_for_resume(path: Path) -> None:
    """RunFolderError (exit 2) unless ``path`` is absent, empty, or a run folder commbench wrote."""
    path = Path(path)
    if not os.path.lexists(path):
        return   # a new folder: --resume of nothing starts the run there
    if not path.is_dir():
        raise _refuse(path, "it is not a folder")
    try:
        names = set(os.listdir(path))
    except OSError as exc:
        raise RunFolderError(f"--resume: cannot read {path}: {exc.strerror or exc}") from None
    if not names - {LOCK_NAME}:
        return   # empty: nothing of anyone's to append to
    if "run.json" not in names:
        raise _refuse(path, "it holds no run.json")
    import json

    try:
        meta = json.loads(files.read_bytes(path, "run.json", cap=64 * 1024 * 1024).decode("utf-8"))
    except (ValueError, RecursionError):
        raise _refuse(path, "its run.json is not JSON") from None
    except OSError as exc:
        raise RunFolderError(f"--resume: cannot read {path / 'run.json'}: {exc.strerror or exc}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("suite"), str):
        raise _refuse(path, "its run.json is not commbench's: it names no suite")
    check_meta(path / "run.json", meta)
    if not names & set(MARKERS):
        raise _refuse(path, f"it has no {LOCK_NAME}, {SUITE_COPY}, logs/ or results")


def _refuse(path: Path, why: str) -> RunFolderError:
    return RunFolderError(f"--resume: {path} is not a run folder commbench wrote ({why}); nothing was "
                          f"written to it. Name the run folder to continue with --out, or start a new run")


def redact_meta(meta):
    """run.json's content with every environment it records (``env`` maps, lists of pairs or of
    NAME=value) showing secret-looking variables as ``NAME: <withheld>`` (docs/results.md)."""
    if isinstance(meta, dict):
        return {k: (_redact_env(v) if k == "env" else _redact_argv(v) if k == "command" else redact_meta(v))
                for k, v in meta.items()}
    if isinstance(meta, list):
        return [redact_meta(v) for v in meta]
    return meta


def _redact_argv(argv):
    """A command line with every argument shaped like a credential (a --set env value) withheld."""
    from ..sysinfo.machine import WITHHELD, looks_secret

    if not isinstance(argv, list):
        return redact_meta(argv)
    return [WITHHELD if isinstance(a, str) and looks_secret(a) else a for a in argv]


def _redact_env(env):
    from ..sysinfo.machine import WITHHELD, is_secret

    if isinstance(env, dict):
        return {k: (WITHHELD if is_secret(k, v) else v) for k, v in env.items()}
    if isinstance(env, list):
        out = []
        for item in env:
            if isinstance(item, (list, tuple)) and len(item) == 2 and is_secret(item[0], item[1]):
                item = [item[0], WITHHELD]
            elif isinstance(item, str) and "=" in item and is_secret(*item.split("=", 1)):
                item = f"{item.split('=', 1)[0]}={WITHHELD}"
            out.append(item)
        return out
    return env
