"""Accept rules on GPU health (the ``health:`` part of a rules file; docs/accept.md, "Health").

Judged per GPU and launch from health.jsonl (analysis/health_view.py): no new double-bit ECC
errors, no uncorrectable, pending or failed row remapping, no XID from the site's list, the PCIe
link at its maximum generation and width, and time throttled (the reasons listed) under a share of
the launch. A node with a GPU that fails any of them is named ``bad node HOST (health)``, whatever
its timings say.

``health:`` may be ``true``/``false`` or a mapping of the settings below. Without the key, the
defaults apply to every run that holds GPU health records, and a run without any says nothing; with
the key, a run without GPU records fails ("not judged"): the gate was asked for and could not see.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import CommbenchError, RunFolderError, preview
from ..health_view import GpuLaunch, RunHealth, delta, dig, run_health, seen_max
from ...sysinfo.health import is_available
from .outcome import Verdict

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
KEYS = {"max_new_double_bit": "an integer >= 0", "max_uncorrectable_rows": "an integer >= 0",
        "fail_pending_rows": "true or false", "xids": "a list of XID numbers",
        "pcie_at_max": "true or false", "max_throttled_pct": "a number >= 0 (percent of the launch)",
        "throttle_reasons": f"a list of {', '.join(THROTTLE_REASONS)}"}


class HealthRulesError(CommbenchError):
    """A malformed ``health:`` part: the message names the file, line and field."""


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


def parse_health(settings, path: Path) -> HealthRules | None:
    """The ``health:`` of a rules mapping (None: `health: false`); defaults when the key is absent."""
    if "health" not in settings:
        return HealthRules()
    raw = settings["health"]
    line = settings.line_of("health") if hasattr(settings, "line_of") else 0
    if raw is False:
        return None
    if raw is True or raw is None:
        return HealthRules(explicit=True)
    if not isinstance(raw, dict):
        raise _fail(path, line, "health", "expected true, false or a mapping of " + ", ".join(sorted(KEYS)))
    kwargs: dict = {"explicit": True}
    for key, value in raw.items():
        ln = raw.line_of(key) if hasattr(raw, "line_of") else line
        if key not in KEYS:
            raise _fail(path, ln, f"health.{key}", f"unknown key; allowed: {sorted(KEYS)}")
        kwargs[key] = _value(key, value, lambda msg, k=key, ln=ln: _fail(path, ln, f"health.{k}", msg))
    return HealthRules(**kwargs)


def _value(key: str, value, fail):
    want = KEYS[key]
    if want == "true or false":
        if not isinstance(value, bool):
            raise fail(f"expected {want}, got {preview(value)}")
        return value
    if want == "an integer >= 0":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise fail(f"expected {want}, got {preview(value)}")
        return value
    if key == "max_throttled_pct":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
            raise fail(f"expected {want}, got {preview(value)}")
        return float(value)
    if not isinstance(value, list) or not value:
        raise fail(f"expected {want} (not empty), got {preview(value)}")
    if key == "xids":
        if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in value):
            raise fail(f"expected {want} (positive integers), got {preview(value)}")
        return tuple(value)
    bad = [r for r in value if r not in THROTTLE_REASONS]
    if bad:
        raise fail(f"unknown reason {preview(bad[0])}; expected {want}")
    return tuple(value)


def _fail(path: Path, line: int, field_name: str, msg: str) -> HealthRulesError:
    return HealthRulesError(f"{path}:{line}: field '{preview(field_name, 80, quote=False)}': {msg}")


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


def health_verdicts(run, rules: HealthRules | None) -> list[Verdict]:
    """The health summary verdict and one ``bad node HOST (health)`` per failing node."""
    if rules is None:
        return []
    try:
        view = run_health(Path(run.path))
    except RunFolderError as exc:
        return [Verdict("health", "node", False, "not judged", "healthy GPUs", str(exc), "GPU health")]
    if not view.judged:
        if not rules.explicit:
            return []
        why = "; ".join(f"{h}: {r}" for h, r in view.no_nvml.items()) or "the run has no health.jsonl"
        return [Verdict("health", "node", False, "not judged", "GPU health records",
                        f"no GPU health record to judge ({why})", "GPU health")]
    return _judged(view, rules)


def _judged(view: RunHealth, rules: HealthRules) -> list[Verdict]:
    bad: dict[str, list[str]] = {}
    for g in view.gpus:
        for problem in gpu_problems(g, rules):
            bad.setdefault(g.host, []).append(f"GPU {g.gpu} launch {g.launch_id}: {problem}")
    hosts = sorted({g.host for g in view.gpus})
    n_gpus = len({(g.host, g.gpu) for g in view.gpus})
    unseen = rules.explicit and bool(view.no_nvml)   # asked for, and some nodes could not be seen
    out = [Verdict("health", "node", not bad and not unseen, f"{len(bad)} of {len(hosts)} node(s) failing",
                   "every GPU healthy in every launch",
                   f"{n_gpus} GPU(s) on {len(hosts)} node(s) judged"
                   + (f"; failing: {', '.join(sorted(bad))}" if bad else "")
                   + (f"; no NVML on {', '.join(sorted(view.no_nvml))}" if view.no_nvml else ""), "GPU health")]
    for host in sorted(bad):
        problems = bad[host]
        shown = "; ".join(problems[:6]) + (f"; and {len(problems) - 6} more" if len(problems) > 6 else "")
        out.append(Verdict(f"bad node {host} (health)", "node", False, f"{len(problems)} problem(s)",
                           "healthy GPUs", shown, "GPU health", level="node", names=(host,),
                           numbers={"problems": len(problems)}))
    return out
