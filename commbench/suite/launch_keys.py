"""Top-level suite keys that tell the launch how to start ranks: ``launch_retries`` (how often a
launch that failed before any rank started is started again; launch/start_retry.py)."""
from __future__ import annotations

LAUNCH_RETRIES_KEY = "launch_retries"
DEFAULT_LAUNCH_RETRIES = 1
MAX_LAUNCH_RETRIES = 10


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


def check_launch_keys(raw, err) -> None:
    """Add a problem (file:line: field) to ``err`` for each launch key of the suite mapping ``raw``
    that is out of range."""
    if LAUNCH_RETRIES_KEY in raw:
        try:
            parse_launch_retries(raw[LAUNCH_RETRIES_KEY])
        except ValueError as exc:
            err.add(raw.line_of(LAUNCH_RETRIES_KEY), LAUNCH_RETRIES_KEY, str(exc))
