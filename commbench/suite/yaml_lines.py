"""The one YAML loader of commbench: safe, and it remembers line numbers so that an error
names the line. Suites and acceptance rules both read their files through ``load_yaml``."""
from __future__ import annotations

from pathlib import Path

import yaml

from ..errors import CommbenchError, SuiteError


class LineDict(dict):
    """A dict from YAML that knows its own line and the line of each key (1-based)."""

    line: int = 0
    key_lines: dict

    def line_of(self, key) -> int:
        return self.key_lines.get(key, self.line)


class LineList(list):
    line: int = 0
    item_lines: list

    def line_of(self, index: int) -> int:
        return self.item_lines[index] if index < len(self.item_lines) else self.line


class _Loader(yaml.SafeLoader):
    pass


class _KeyError(Exception):
    """A bad mapping key ("LINE: KEY: message"); load_yaml adds the path and the caller's error type."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    out = LineDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise _KeyError(f"{key_node.start_mark.line + 1}: key: a key must be a plain value, not {key!r}")
        if key in out:
            raise _KeyError(f"{key_node.start_mark.line + 1}: {key}: duplicate key {key!r}")
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.item_lines = [child.start_mark.line + 1 for child in node.value]
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_yaml(path: Path, error: type[CommbenchError] = SuiteError):
    """Parse a YAML file with the safe loader (mappings become LineDict, lists LineList).

    An unreadable file, a syntax error, a duplicate key or a non-plain key raises ``error``
    (SuiteError for suites, RulesError for rules) naming the file and line."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader derives from SafeLoader
    except _KeyError as exc:
        raise error(f"{path}:{exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"{where}: YAML syntax error: {problem}") from None
