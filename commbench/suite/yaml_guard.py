"""What YAML text commbench agrees to build into objects: bounded size, UTF-8, bounded nesting and
bounded alias expansion. Checked on the parser's events, before anything is constructed, so a
hostile file (an alias bomb, 10 000 nested brackets) costs one linear pass and a clear error,
never unbounded memory, a RecursionError or a message that embeds the whole value."""
from __future__ import annotations

import os
import re

import yaml

from ..errors import CommbenchError, preview

# Defaults; the environment variable named beside each lifts it (the error message says so).
MAX_TEXT_BYTES = 1024 * 1024          # COMMBENCH_MAX_YAML_BYTES: a large suite is ~20 KiB
MAX_NODES = 200_000                   # COMMBENCH_MAX_YAML_NODES: values after expanding aliases
MAX_DEPTH = 64                        # a suite needs ~6 levels; deeper is not a suite
MAX_NUMBER_CHARS = 1000               # Python refuses to convert integers of over 4300 digits
_NUMBER = re.compile(r"[-+]?[0-9_.,:xXoObBeE]+")

BYTES_VAR, NODES_VAR = "COMMBENCH_MAX_YAML_BYTES", "COMMBENCH_MAX_YAML_NODES"


class YamlLimitError(Exception):
    """The text breaks a limit; ``line`` is 1-based (0: the whole file)."""

    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line, self.message = line, message


def limit(var: str, default: int) -> int:
    """A limit from its environment variable (a positive integer), else the default. A value that
    is set but not a positive whole number is refused, never silently replaced by the default."""
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit() and 0 < len(raw) <= 18 and int(raw) > 0):
        raise CommbenchError(f"{var}={preview(raw, 40)} is not a positive whole number (the default is "
                             f"{default}); set it to a larger number to lift the limit, or unset it")
    return int(raw)


def decode(data: bytes) -> str:
    """Strict UTF-8 (a UTF-8 byte-order mark is dropped); else YamlLimitError naming the line."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise YamlLimitError(1, "the file is UTF-16 text; save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise YamlLimitError(line, f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as "
                                   "UTF-8") from None


def check_size(num_bytes: int) -> None:
    cap = limit(BYTES_VAR, MAX_TEXT_BYTES)
    if num_bytes > cap:
        raise YamlLimitError(0, f"{num_bytes} bytes is above the limit of {cap} bytes for a suite or "
                                f"rules file (set {BYTES_VAR} to lift it)")


def check_events(text: str) -> None:
    """One pass over the parser's events: nesting depth, recursive aliases and the number of
    values the document holds once every alias is expanded."""
    cap = limit(NODES_VAR, MAX_NODES)
    sizes: dict[str, int] = {}        # anchor -> values under it, aliases expanded
    open_anchors: set[str] = set()
    stack: list[list] = [[None, 0]]   # [anchor, values so far] per open collection
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        line = ev.start_mark.line + 1 if ev.start_mark else 0
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            if len(stack) > MAX_DEPTH:
                raise YamlLimitError(line, f"nesting deeper than {MAX_DEPTH} levels")
            if ev.anchor:
                open_anchors.add(ev.anchor)
            stack.append([ev.anchor, 0])
            continue
        if isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, n = stack.pop()
            n += 1
            if anchor:
                open_anchors.discard(anchor)
                sizes[anchor] = n
        elif isinstance(ev, yaml.ScalarEvent):
            n = 1
            if ev.implicit[0] and len(ev.value) > MAX_NUMBER_CHARS and _NUMBER.fullmatch(ev.value) \
                    and _resolves_to_number(ev.value):
                raise YamlLimitError(line, f"a number of {len(ev.value)} characters (more than "
                                           f"{MAX_NUMBER_CHARS}); if it is text, quote it")
            if ev.anchor:
                sizes[ev.anchor] = 1
        elif isinstance(ev, yaml.AliasEvent):
            if ev.anchor in open_anchors:
                raise YamlLimitError(line, f"alias *{ev.anchor[:40]} refers to a value that contains it "
                                           "(a recursive structure)")
            n = sizes.get(ev.anchor, 1)   # an undefined alias: the composer names it next
        else:
            continue
        stack[-1][1] += n
        if stack[-1][1] > cap or sum(s[1] for s in stack) > cap:
            raise YamlLimitError(line, f"more than {cap} values once aliases are expanded (set "
                                       f"{NODES_VAR} to lift the limit)")


def _resolves_to_number(value: str) -> bool:
    """Whether YAML reads this unquoted scalar as an int or a float (a long word of letters such
    as e, b or x matches _NUMBER but stays text)."""
    tag = yaml.SafeLoader.resolve(yaml.SafeLoader, yaml.ScalarNode, value, (True, False))
    return tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
