"""A suite's top-level settings about how it runs (not what it measures), read once when the suite
loads: ``duration`` (burn-in), ``wave_timeout`` and ``launch_retries``, each with the environment
variable that overrides it. `validate`, `run --dry-run` and `run` therefore refuse the same bad
values, before any run folder exists (docs/suites.md)."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from ..units import parse_duration

DURATION_KEY = "duration"
WAVE_TIMEOUT_KEY = "wave_timeout"
LAUNCH_RETRIES_KEY = "launch_retries"
WAVE_TIMEOUT_VAR = "COMMBENCH_WAVE_TIMEOUT"   # the wave time limit from the command line (over the suite's)
RETRIES_VAR = "COMMBENCH_LAUNCH_RETRIES"
DEFAULT_LAUNCH_RETRIES = 1
MAX_LAUNCH_RETRIES = 10
MAX_DURATION_S = 30 * 86400.0   # a burn-in or a wave limit past a month is a typo, not a plan


@dataclass(frozen=True)
class SuiteSettings:
    """How a suite runs. ``duration_s``: burn-in length (None: one pass); ``wave_timeout_s``: the
    most one wave may take (None: no limit); ``launch_retries``: restarts of a launch whose
    launcher failed before any rank started."""

    duration_s: float | None = None
    wave_timeout_s: float | None = None
    launch_retries: int = DEFAULT_LAUNCH_RETRIES


def parse_launch_retries(value) -> int:
    """``launch_retries`` as a count (0 to MAX_LAUNCH_RETRIES); ValueError says what is wrong."""
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else None
    if text is None or not text.isdigit():
        raise ValueError(f"must be a whole number from 0 to {MAX_LAUNCH_RETRIES}, got {value!r}")
    count = int(text)
    if count > MAX_LAUNCH_RETRIES:
        raise ValueError(f"at most {MAX_LAUNCH_RETRIES} retries (a launcher that fails that often is "
                         f"not going to start), got {count}")
    return count


def parse_time_limit(value) -> float:
    """A positive, finite duration of at most MAX_DURATION_S (a burn-in, a wave limit)."""
    seconds = parse_duration(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"must be a duration above 0 s, got {value!r}")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"at most {MAX_DURATION_S / 86400:.0f} days, got {value!r}")
    return seconds


def read_settings(raw, err, environ=None) -> SuiteSettings:
    """The settings of the suite mapping ``raw``; each bad value (from the file or from the
    variable that overrides it) is added to ``err`` with its line or variable name."""
    environ = os.environ if environ is None else environ
    values: dict = {}
    for key, var, field_name, parse in ((DURATION_KEY, None, "duration_s", parse_time_limit),
                                        (WAVE_TIMEOUT_KEY, WAVE_TIMEOUT_VAR, "wave_timeout_s", parse_time_limit),
                                        (LAUNCH_RETRIES_KEY, RETRIES_VAR, "launch_retries", parse_launch_retries)):
        given = environ.get(var, "").strip() if var else ""
        if given:
            line, where, value = 1, f"environment variable {var}", given
        elif hasattr(raw, "get") and raw.get(key) is not None:
            line, where, value = raw.line_of(key), key, raw[key]
        else:
            continue
        try:
            values[field_name] = parse(value)
        except ValueError as exc:
            err.add(line, where, str(exc))
    _check_withholding(err)
    return SuiteSettings(**values)


def _check_withholding(err) -> None:
    """The site's secret names and patterns (sysinfo/secrets.py) are read while the run writes
    run.json: an unusable one is refused here, before any run folder exists."""
    from ..errors import CommbenchError
    from ..sysinfo.secrets import check_site_settings

    try:
        check_site_settings()
    except CommbenchError as exc:
        err.add(1, "environment", str(exc))
