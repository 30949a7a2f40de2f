"""Accept rules on GPU health (the ``health:`` part of a rules file; docs/accept.md, "Health").

Judged per GPU and launch from health.jsonl (analysis/health_view.py; the judgement itself, pure, is
sysinfo/health_judge.py, which the search shares): no new double-bit ECC
errors, no uncorrectable, pending or failed row remapping, no XID from the site's list, the PCIe
link at its maximum generation and width, and time throttled (the reasons listed) under a share of
the launch. A node with a GPU that fails any of them is named ``bad node HOST (health)``, whatever
its timings say.

``health:`` may be ``true``/``false`` or a mapping of the settings below. Without the key, the
defaults apply to every run that holds GPU health records, and a run without any says nothing; with
the key, a run without GPU records fails ("not judged"): the gate was asked for and could not see.
"""
from __future__ import annotations

from pathlib import Path

from ...errors import CommbenchError, RunFolderError, preview
from ..health_view import RunHealth, run_health
from ...sysinfo.health_judge import DEFAULT_THROTTLE, DEFAULT_XIDS, THROTTLE_REASONS, HealthRules, failing_gpus, \
    gpu_problems
from .outcome import Verdict

__all__ = ["DEFAULT_THROTTLE", "DEFAULT_XIDS", "THROTTLE_REASONS", "HealthRules", "HealthRulesError", "gpu_problems",
           "health_verdicts", "parse_health"]
KEYS = {"max_new_double_bit": "an integer >= 0", "max_uncorrectable_rows": "an integer >= 0",
        "fail_pending_rows": "true or false", "xids": "a list of XID numbers",
        "pcie_at_max": "true or false", "max_throttled_pct": "a number >= 0 (percent of the launch)",
        "throttle_reasons": f"a list of {', '.join(THROTTLE_REASONS)}"}


class HealthRulesError(CommbenchError):
    """A malformed ``health:`` part: the message names the file, line and field."""


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
    bad = failing_gpus(view, rules)
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
