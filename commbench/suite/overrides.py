"""`--set key=value` and `--only`: overrides applied to every benchmark before validation."""
from __future__ import annotations

import yaml

from ..errors import SuiteError
from .schema import ALIASES, COMMON_KEYS
from .yaml_lines import LineDict

ONLY_KEY = "only"   # overrides[ONLY_KEY]: benchmark names kept (`run --only`)


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, object]:
    """`--set key=value` items -> {key: value}; values are YAML scalars or lists ('ranks=2', 'sizes=[1MiB]')."""
    out: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        top = key.split(".", 1)[0]
        if not sep or not key or (top not in COMMON_KEYS and top not in ALIASES) or top == "params" and "." not in key:
            raise SuiteError(f"--set {item!r}: expected KEY=VALUE with KEY one of "
                             f"{', '.join(k for k in COMMON_KEYS if k != 'params')} or params.NAME")
        try:
            out[key] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SuiteError(f"--set {item!r}: value is not valid YAML: {exc}") from None
    return out


def apply_overrides(benches, overrides: dict[str, object]) -> None:
    """Set each override in every benchmark (params.NAME inside its params)."""
    for bench in benches:
        if not isinstance(bench, LineDict):
            continue
        for key, value in overrides.items():
            if key.startswith("params."):
                params = bench.get("params")
                if not isinstance(params, dict):
                    params = LineDict()
                    params.line, params.key_lines = bench.line, {}
                    bench["params"] = params
                    bench.key_lines["params"] = bench.line
                params[key.split(".", 1)[1]] = value
            else:
                for alias, full in ALIASES.items():  # `op` in the suite, `ops` on the command line
                    if full == ALIASES.get(key, key):
                        bench.pop(alias, None)
                bench[ALIASES.get(key, key)] = value
                bench.key_lines.setdefault(ALIASES.get(key, key), bench.line)
