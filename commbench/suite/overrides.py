"""`--set key=value` and `--only`: overrides applied to every benchmark before validation."""
from __future__ import annotations

from ..errors import SuiteError, preview
from .schema import ALIASES, COMMON_KEYS
from .yaml_lines import LineDict, parse_yaml_text

ONLY_KEY = "only"   # overrides[ONLY_KEY]: benchmark names kept (`run --only`)


def parse_overrides(items: list[str] | tuple[str, ...]) -> dict[str, object]:
    """`--set key=value` items -> {key: value}; values are YAML scalars or lists ('ranks=2', 'sizes=[1MiB]')."""
    out: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        top = key.split(".", 1)[0]
        dotted_ok = top == "params" and len(key) > len("params.")   # only params.NAME has a dot
        if (not sep or not key or (top not in COMMON_KEYS and top not in ALIASES)
                or (("." in key) != (top == "params")) or (top == "params" and not dotted_ok)):
            raise SuiteError(f"--set {preview(item)}: expected KEY=VALUE with KEY one of "
                             f"{', '.join(k for k in COMMON_KEYS if k != 'params')} or params.NAME")
        out[key] = _plain(parse_yaml_text(text, f"--set {preview(item)}", SuiteError))
    return out


def _plain(value):
    """A `--set` value as plain dicts and lists: line numbers of the command line's text must
    not pass for lines of the suite file in error messages."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


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
