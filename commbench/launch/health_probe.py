"""A launch's GPU health records, taken by local rank 0 of each node (rank.py calls ``begin`` before
the first Case and ``LaunchHealth.end`` after the last): a ``start`` record per GPU, the node's
XID and ECC events as they arrive (a daemon thread, commbench/sysinfo/health_watch.py), and an
``end`` record per GPU with the highest PCIe link, temperature and power seen in between.

Why local rank 0 and not the launcher: only a process on the node can read its GPUs, and the ranks
are on every node of the launch; one process per node reads all of that node's GPUs once.
Each node appends its own lines to health.jsonl as they happen (runfolder/health_files.py), so an
XID that kills the launch is on disk before the launch dies.

Health is never allowed to stop a measurement: whatever fails here becomes one line on stderr,
and the launch goes on.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..runfolder.health_files import append_health
from ..sysinfo import health
from ..sysinfo.health_watch import HealthWatch


class LaunchHealth:
    """What ``begin`` started on this rank (nothing on ranks that are not their node's rank 0)."""

    def __init__(self, run_dir: Path | None = None, tags: dict | None = None, host: str | None = None):
        self.run_dir, self.tags, self.host = run_dir, tags or {}, host
        self.nvml = self.watch = None

    def _store(self, records: list[dict]) -> None:
        append_health(self.run_dir, [{**r, **self.tags} for r in records])

    def end(self) -> None:
        """The end records (with what the watch saw), then NVML closed; safe to call on any rank."""
        if self.run_dir is None:
            return
        try:
            seen, watched, errors = {}, {}, []
            if self.watch is not None:
                self.watch.stop()
                seen, watched, errors = self.watch.seen(), self.watch.watched, self.watch.errors
            records = health.node_records(self.nvml, "end", self.host)
            for rec in records:
                if rec.get("gpu") is not None:
                    rec["during"] = seen.get(rec["gpu"], {})
                    rec["events_watched"] = watched.get(rec["gpu"], health.not_available("no event watch"))
                    if errors:
                        rec["watch_errors"] = errors[:10]
            self._store(records)
        except Exception as exc:  # noqa: BLE001 - health must never fail the launch
            _say(f"the end health record was not stored: {exc}")
        finally:
            if self.nvml is not None:
                self.nvml.shutdown()
            self.run_dir = None


def begin(run_dir: Path, task: dict, world) -> LaunchHealth:
    """On local rank 0: the start records stored and the event watch running; elsewhere nothing."""
    if world.local_rank != 0:
        return LaunchHealth()
    tags = {"launch_id": int(task["launch_id"]), "attempt": int(task.get("attempt", 0)),
            "node_ranks": world.local_size, "launch_hosts": list(task.get("hosts") or ())}
    host = world.hostname
    probe = LaunchHealth(Path(run_dir), tags, host)
    try:
        probe.nvml = health.open_nvml()
        probe._store(health.node_records(probe.nvml, "start", host))
        gpus = health.handles(probe.nvml) if probe.nvml else []
        if gpus:
            probe.watch = HealthWatch(probe.nvml, gpus,
                                      lambda ev: probe._store([{**health.header("event", host), **ev}])).start()
    except Exception as exc:  # noqa: BLE001 - health must never fail the launch
        _say(f"the start health record was not stored: {exc}")
    return probe


def _say(text: str) -> None:
    print(f"commbench: health: {text}", file=sys.stderr, flush=True)
