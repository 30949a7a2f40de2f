"""The judgement of GPU health records, pure (nothing read, nothing written): each GPU's ``start`` and
``end`` records of a launch joined (``GpuLaunch``), the deltas from start to end, and whether the
GPU passes the health rules (``HealthRules``, ``gpu_problems``; docs/accept.md, "Health").

It sits on the ground floor so that every floor that must judge health can: the search launches
(launch/search_run.py names a node that fails health after the wave that showed it), accept's rules
(analysis/accept/health_rules.py), the report's sections and the acceptance simulator. The records
come from health.jsonl (runfolder/health_files.py) or, in the simulator, are made up in memory.

A counter that was "not available" at either end stays so in a delta (with the reason), never 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .health import is_available, not_available

# XIDs that mean the GPU, its memory, its firmware or its links failed (not the application), from
# NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html; the
# index of the Xid pages: https://docs.nvidia.com/deploy/xid-errors/index.html). docs/accept.md
# lists them with what each means; a site replaces the list with `xids:`.
DEFAULT_XIDS = {
    48: "double-bit ECC error (DBE) in GPU memory",
    62: "internal micro-controller halt (GPU firmware)",
    63: "ECC page retirement or row remapping recorded: the GPU needs a reset to use the spare row",
    64: "ECC page retirement or row remapping could not be recorded",
    74: "NVLink error",
    79: "GPU has fallen off the bus (no longer reachable over PCIe)",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (the application using the memory was stopped; a reset recovers it)",
    95: "uncontained ECC error (every application on the GPU is affected; reset needed)",
    119: "GSP RPC timeout (the GPU System Processor did not answer the driver)",
    120: "GSP error (the GPU System Processor's firmware reported an error)",
    140: "unrecovered ECC error",
    154: "GPU recovery action changed: the driver asks for a GPU reset or a node reboot",
}
THROTTLE_REASONS = ("sw_power_cap", "sync_boost", "sw_thermal", "hw_thermal", "hw_power_brake")
DEFAULT_THROTTLE = ("sw_thermal", "hw_thermal", "hw_power_brake")


@dataclass(frozen=True)
class HealthRules:
    explicit: bool = False                 # `health:` written in the rules (a run with no records fails)
    max_new_double_bit: int = 0            # new double-bit errors per GPU per launch
    max_uncorrectable_rows: int = 0        # rows remapped for uncorrectable errors, per GPU, at the end
    fail_pending_rows: bool = True         # a remapping waiting for a reset (or one that failed) fails
    xids: tuple[int, ...] = tuple(DEFAULT_XIDS)
    pcie_at_max: bool = True
    max_throttled_pct: float = 1.0
    throttle_reasons: tuple[str, ...] = DEFAULT_THROTTLE


@dataclass
class GpuLaunch:
    """One GPU of one node over one launch (attempt)."""

    launch_id: int
    attempt: int
    host: str
    gpu: int
    start: dict | None = None
    end: dict | None = None
    events: list = field(default_factory=list)

    @property
    def name(self) -> str:
        rec = self.end or self.start or {}
        return str(rec.get("name", ""))

    @property
    def duration_s(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return max(0.0, float(self.end["t"]) - float(self.start["t"]))

    def xids(self) -> list[int]:
        return [int(e["xid"]) for e in self.events if e.get("event") == "xid" and isinstance(e.get("xid"), int)]


@dataclass
class RunHealth:
    gpus: list[GpuLaunch]
    no_nvml: dict[str, str]          # host -> why its records hold no GPU
    hosts: list[str]

    @property
    def judged(self) -> bool:
        return bool(self.gpus)


def group_records(records) -> RunHealth:
    """Health records (health.jsonl's, in file order) grouped per (launch, attempt, host, GPU)."""
    by_key: dict[tuple, GpuLaunch] = {}
    no_nvml: dict[str, str] = {}
    hosts: list[str] = []
    for rec in records:
        host = rec["host"]
        if host not in hosts:
            hosts.append(host)
        if rec.get("gpu") is None:
            if rec["phase"] != "event":
                no_nvml[host] = str(rec.get("nvml", not_available("no GPU in the record")))
            continue
        key = (rec["launch_id"], rec["attempt"], host, rec["gpu"])
        item = by_key.setdefault(key, GpuLaunch(*key))
        if rec["phase"] == "event":
            item.events.append(rec)
        else:
            setattr(item, rec["phase"], rec)   # a repeated phase (never written twice) keeps the last
    gpus = sorted(by_key.values(), key=lambda g: (g.host, g.launch_id, g.attempt, g.gpu))
    for g in gpus:
        no_nvml.pop(g.host, None)
    return RunHealth(gpus, no_nvml, hosts)


def dig(rec: dict | None, path: str):
    """rec['a']['b'] for path 'a.b'; "not available: ..." where the record or a level is missing."""
    if rec is None:
        return not_available("no record")
    value = rec
    for part in path.split("."):
        if not isinstance(value, dict):
            return value if not is_available(value) else not_available(f"{path} is not in the record")
        value = value.get(part, not_available(f"{path} is not in the record"))
    return value


def delta(g: GpuLaunch, path: str):
    """end - start of a counter, or "not available: ..." (the first end that lacks it, with why)."""
    if g.end is None:
        return not_available("no end record (the launch ended before its end was taken)")
    a, b = dig(g.start, path), dig(g.end, path)
    for v in (a, b):
        if not is_available(v):
            return v
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return not_available(f"{path} is not a number")
    return b - a


def seen_max(g: GpuLaunch, key: str, during_key: str):
    """The highest value of pcie.<key> over start, end and the samples in between."""
    values = [dig(r, f"pcie.{key}") for r in (g.start, g.end) if r is not None]
    values.append(dig(g.end, f"during.{during_key}") if g.end is not None else not_available("no end record"))
    numbers = [v for v in values if is_available(v) and isinstance(v, (int, float))]
    if numbers:
        return max(numbers)
    return next((v for v in values if not is_available(v)), not_available("no record"))


def gpu_problems(g: GpuLaunch, rules: HealthRules) -> list[str]:
    """Why this GPU fails over this launch (empty: it passes)."""
    out = []
    dbe = delta(g, "ecc.volatile_dbe")
    if not is_available(dbe):
        dbe = delta(g, "ecc.aggregate_dbe")
    dbe_events = sum(1 for e in g.events if e.get("event") == "double_bit_ecc")
    new_dbe = max(dbe if is_available(dbe) else 0, dbe_events)
    if new_dbe > rules.max_new_double_bit:
        out.append(f"{new_dbe} new double-bit ECC error(s) (limit {rules.max_new_double_bit})")
    rows = dig(g.end or g.start, "remapped_rows")
    if isinstance(rows, dict):
        if int(rows.get("uncorrectable", 0)) > rules.max_uncorrectable_rows:
            out.append(f"{rows['uncorrectable']} row(s) remapped for uncorrectable errors "
                       f"(limit {rules.max_uncorrectable_rows})")
        if rules.fail_pending_rows and rows.get("pending"):
            out.append("a row remapping is pending (the GPU needs a reset)")
        if rules.fail_pending_rows and rows.get("failure"):
            out.append("a row remapping failed")
    for xid in sorted(set(g.xids())):
        if xid in rules.xids:
            out.append(f"XID {xid} ({DEFAULT_XIDS.get(xid, 'on the site list')})")
    if rules.pcie_at_max:
        out += _pcie_problems(g)
    if g.duration_s and rules.max_throttled_pct is not None:
        out += _throttle_problems(g, rules)
    return out


def _pcie_problems(g: GpuLaunch) -> list[str]:
    out = []
    for what, key, during, limit in (("generation", "gen", "pcie_gen_max", "gen_max"),
                                     ("width", "width", "pcie_width_max", "width_max")):
        seen, top = seen_max(g, key, during), dig(g.end or g.start, f"pcie.{limit}")
        if is_available(seen) and is_available(top) and isinstance(top, int) and seen < top:
            label = f"Gen{seen} (max Gen{top})" if key == "gen" else f"x{seen} (max x{top})"
            out.append(f"PCIe link trained down: {what} {label}")
    return out


def _throttle_problems(g: GpuLaunch, rules: HealthRules) -> list[str]:
    held = {r: delta(g, f"throttle_ns.{r}") for r in rules.throttle_reasons}
    total_ns = sum(v for v in held.values() if is_available(v) and v > 0)
    pct = 100.0 * total_ns / (g.duration_s * 1e9)
    if pct <= rules.max_throttled_pct:
        return []
    parts = ", ".join(f"{r} {v / 1e6:.0f} ms" for r, v in held.items() if is_available(v) and v > 0)
    return [f"throttled {pct:.1f}% of the launch ({parts}; limit {rules.max_throttled_pct:g}%)"]


def failing_gpus(view: RunHealth, rules: HealthRules) -> dict[str, list[str]]:
    """host -> its problems ('GPU g launch L: ...'), for every host with a GPU that fails."""
    bad: dict[str, list[str]] = {}
    for g in view.gpus:
        for problem in gpu_problems(g, rules):
            bad.setdefault(g.host, []).append(f"GPU {g.gpu} launch {g.launch_id}: {problem}")
    return bad


def unhealthy_hosts(records, rules: HealthRules | None = None, launch_ids=None) -> dict[str, str]:
    """host -> one line saying why it fails health, over the records of ``launch_ids`` (all when
    None): what a search names a node for without a confirming wave (launch/search_run.py)."""
    wanted = None if launch_ids is None else set(launch_ids)
    mine = [r for r in records if wanted is None or r.get("launch_id") in wanted]
    bad = failing_gpus(group_records(mine), rules or HealthRules())
    return {host: _one_line(problems) for host, problems in sorted(bad.items())}


def _one_line(problems: list[str], most: int = 3) -> str:
    more = len(problems) - most
    return "; ".join(problems[:most]) + (f"; and {more} more" if more > 0 else "")
