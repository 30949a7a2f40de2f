"""`--profile nccl` glue: the launch environment that loads our plugin, and per-Case capture in a rank.

NCCL reads ``NCCL_PROFILER_PLUGIN`` once, when its first communicator is made,
so the parent sets it for the whole launch (:func:`launch_env`); Cases profiled
with nccl therefore run in launches of their own. In a rank, :class:`NcclCapture`
asks the plugin (through ctypes, on the library NCCL itself loaded) to write a
mark before and after the timed batch; the records between the two marks are
this rank's tasks of that batch.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

from . import nccl_records

ENV_DIR = "COMMBENCH_NCCL_PROFILE_DIR"
ENV_UNAVAILABLE = "COMMBENCH_NCCL_PROFILE_UNAVAILABLE"
PLUGIN_ENV = "NCCL_PROFILER_PLUGIN"
MIN_NCCL_VERSION = 22803   # the first NCCL that loads profiler ABI v5
MARK_WAIT_MS = 200          # the proxy thread reports kernel ends shortly after the GPU finished


def traces_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "traces" / "nccl"


def launch_env(run_dir: Path) -> dict[str, str]:
    """Variables for a launch whose Cases are profiled with nccl.

    If the plugin cannot be built here the launch still runs, unprofiled, and every
    such Case says why (``COMMBENCH_NCCL_PROFILE_UNAVAILABLE``)."""
    from ..jit import JitError
    from .plugin_build import build

    try:
        lib = build()
    except JitError as exc:
        return {ENV_UNAVAILABLE: "NCCL profiler plugin not built: " + str(exc).splitlines()[0][:300]}
    from ..runfolder import trace_files

    out = trace_files.nccl_dir(run_dir)   # the plugin (C) writes its own files into it
    return {PLUGIN_ENV: str(lib), ENV_DIR: str(out)}


def nccl_version_reason() -> str | None:
    """Why this process's NCCL cannot load a v5 plugin, or None (also None when there is no NCCL:
    then the Case does not use NCCL and the summary says the plugin was never loaded)."""
    try:
        from .. import nccl_lib

        code = nccl_lib.version()
    except Exception:  # noqa: BLE001 - no libnccl here: nothing to profile, said later
        return None
    if code < MIN_NCCL_VERSION:
        return (f"NCCL {nccl_lib.version_str(code)} has no profiler plugin ABI v5 "
                f"(needs 2.28.3 or newer): not profiled")
    return None


def _plugin_handle():
    """The plugin library as NCCL loaded it (RTLD_NOLOAD: never load it ourselves); None if not loaded."""
    path = os.environ.get(PLUGIN_ENV)
    if not path:
        return None
    for name in (path, Path(path).name):
        try:
            return ctypes.CDLL(name, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
        except OSError:
            continue
    return None


def own_files(folder: Path, pid: int | None = None) -> list[Path]:
    """This process's plugin files (one per communicator it made)."""
    return sorted(Path(folder).glob(f"nccl-*-pid{pid or os.getpid()}-comm*-rank*.jsonl"))


class _Reader:
    """Reads each plugin file from where it stopped last time, so a long run costs O(new lines) per Case."""

    def __init__(self):
        self.offsets: dict[Path, int] = {}
        self.inited: set[Path] = set()

    def new_lines(self, path: Path) -> list[dict]:
        start = self.offsets.get(path, 0)
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                data = fh.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1      # a line still being written waits for the next read
        self.offsets[path] = start + end
        lines = nccl_records.parse_lines(data[:end].decode(errors="replace"))
        if any(d.get("kind") == "init" for d in lines):
            self.inited.add(path)
        return lines


_READER = _Reader()


class NcclCapture:
    """Marks around one Case's timed batch on this rank and the summary of what NCCL did in it."""

    def __init__(self, case_id: str, iters: int):
        self.case_id, self.iters = case_id, iters
        self.folder = Path(os.environ[ENV_DIR]) if os.environ.get(ENV_DIR) else None
        self.reason = os.environ.get(ENV_UNAVAILABLE) or (
            None if self.folder else "NCCL profiler not set up for this launch") or nccl_version_reason()

    def _mark(self, label: str, wait_ms: int) -> bool:
        lib = _plugin_handle()
        if lib is None:
            return False
        fn = lib.commbench_profiler_mark
        fn.argtypes, fn.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_int
        fn(label.encode(), wait_ms)
        return True

    def begin(self) -> None:
        if self.reason is None:
            self._mark(f"begin {self.case_id}", 0)   # also writes the warm-up's records out of the way

    def end(self) -> dict:
        """Call after the batch's stream was synchronised. Returns a picklable per-rank summary."""
        if self.reason is not None:
            return {"unavailable": self.reason}
        marked = self._mark(f"end {self.case_id}", MARK_WAIT_MS)
        picked = None
        for f in own_files(self.folder):
            part = nccl_records.between_marks(_READER.new_lines(f), f"begin {self.case_id}",
                                              f"end {self.case_id}")
            if part is not None:
                picked = (picked or []) + part
        loaded = marked and bool(_READER.inited)
        return nccl_records.rank_summary(picked if loaded else None, self.iters, loaded)


def case_columns(summaries: list[dict], world_size: int) -> dict:
    """Row columns from every rank's :meth:`NcclCapture.end` (rank 0)."""
    unavailable = [s["unavailable"] for s in summaries if s.get("unavailable")]
    if unavailable:
        return {"profile_note": unavailable[0]}
    return nccl_records.case_columns(summaries, world_size)
