"""Which results columns can be a metric: a metric is compared as a number (a search's groups, an
acceptance rule), so a column that holds text or a label (op, status, host, a family's text or
true/false parameter) is refused where it is named, before anything runs (docs/suites.md,
docs/accept.md)."""
from __future__ import annotations

from ..runfolder.schema import COLUMNS, NUMERIC

# Text columns some rows carry beside the contract's (docs/results.md)
_OTHER_TEXT = ("host", "hosts", "gpu", "nccl_algo", "nccl_proto", "transport", "pass_utc", "source",
               "source_line", "registered", "ll_variant", "reduce_op")


def text_columns() -> frozenset[str]:
    """Result columns that never hold a number: the contract's labels, and every family parameter
    whose values are text or true/false."""
    from ..families import all_families

    params = {name for fam in all_families().values() for name, p in fam.params.items()
              if not any(t in (int, float) for t in p.types)}
    return frozenset(c for c in COLUMNS if c not in NUMERIC) | set(_OTHER_TEXT) | params


def metric_refusal(name) -> str | None:
    """Why ``name`` cannot be a metric (None: it can)."""
    if not isinstance(name, str) or not name.strip():
        return f"a numeric results column name such as time_us or busbw_gbps, got {name!r}"
    if name in text_columns():
        return (f"{name!r} is a column of text or labels, not a number: a metric is compared as a "
                f"number (use time_us, busbw_gbps or another measured column)")
    return None
