"""The one YAML loader of commbench: safe, and it remembers line numbers so that an error
names the line. Suites and acceptance rules both read their files through ``load_yaml``, and
`--set` values through ``parse_yaml_text``; both first pass ``yaml_guard``'s limits."""
from __future__ import annotations

from pathlib import Path

import yaml

from ..errors import CommbenchError, SuiteError, preview
from . import yaml_guard


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
    """A mapping with its lines. Merge keys (``<<: *base``) follow the YAML merge-key spec: the
    merged keys come first and a key written in the mapping itself overrides one merged in (of
    several merged mappings, the first listed wins); a key written twice in the mapping itself is
    an error (docs/suites.md, "Anchors and merge keys")."""
    own = sum(k.tag != "tag:yaml.org,2002:merge" for k, _ in node.value)
    loader.flatten_mapping(node)
    merged = len(node.value) - own   # flatten_mapping puts the merged pairs first
    out = LineDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    written: set = set()
    for i, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise _KeyError(f"{key_node.start_mark.line + 1}: key: a key must be a plain value, not "
                            f"{preview(key)}")
        if key in written:
            raise _KeyError(f"{key_node.start_mark.line + 1}: {preview(key, 60, quote=False)}: duplicate key "
                            f"{preview(key)}")
        if i >= merged:
            written.add(key)
        out.pop(key, None)   # a later pair wins: the mapping's own key over a merged one
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _construct_str(loader: _Loader, node: yaml.ScalarNode) -> str:
    """A string; a NUL byte (written as \\0 or \\x00 in a quoted string) is refused: no file name,
    environment value or name can hold one."""
    value = loader.construct_scalar(node)
    if "\0" in value:
        raise yaml.constructor.ConstructorError(
            None, None, f"{preview(value, 60)} holds a NUL character (\\0): no name, path or environment value "
            "can hold one; remove it", node.start_mark)
    return value


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.item_lines = [child.start_mark.line + 1 for child in node.value]
    return out


def _refuse_tag(loader: _Loader, node: yaml.Node):
    raise yaml.constructor.ConstructorError(
        None, None, f"tag {node.tag.replace('tag:yaml.org,2002:', '!!')} is not used in commbench files",
        node.start_mark)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
_Loader.add_constructor("tag:yaml.org,2002:str", _construct_str)
# Sets, ordered maps, pairs and binary blobs never appear in a suite or rules file; refusing them
# keeps every value a plain scalar, list or mapping for the checks that follow.
for _tag in ("set", "omap", "pairs", "binary"):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)


def load_yaml(path: Path, error: type[CommbenchError] = SuiteError):
    """Parse a YAML file with the safe loader (mappings become LineDict, lists LineList).

    An unreadable, oversized or non-UTF-8 file, a syntax error, nesting or alias expansion past
    ``yaml_guard``'s limits, a duplicate key or a non-plain key raises ``error`` (SuiteError for
    suites, RulesError for rules) naming the file and line."""
    try:
        if Path(path).exists() and not Path(path).is_file():   # a folder, a pipe, a device
            raise error(f"{path}: not a regular file")
        yaml_guard.check_size(Path(path).stat().st_size)
        data = Path(path).read_bytes()
        yaml_guard.check_size(len(data))   # a pipe or a file that grew while read
        text = yaml_guard.decode(data)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    except yaml_guard.YamlLimitError as exc:
        raise error(f"{path}:{exc.line or 1}: {exc.message}") from None
    return parse_yaml_text(text, str(path), error)


def parse_yaml_text(text: str, where: str, error: type[CommbenchError] = SuiteError):
    """Parse YAML text (a file's, or a `--set` value) within ``yaml_guard``'s limits; ``where``
    starts every message (a path, or the `--set` item)."""
    try:
        yaml_guard.check_size(len(text.encode("utf-8", "surrogatepass")))
        yaml_guard.check_events(text)
        return yaml.load(text, Loader=_Loader)  # _Loader derives from SafeLoader
    except yaml_guard.YamlLimitError as exc:
        raise error(f"{where}:{exc.line or 1}: {exc.message}") from None
    except _KeyError as exc:
        raise error(f"{where}:{exc}") from None
    except yaml.reader.ReaderError as exc:   # a character YAML does not allow (a raw NUL byte ...)
        line = text.count("\n", 0, max(0, exc.position)) + 1
        char = exc.character if isinstance(exc.character, str) else chr(exc.character)
        raise error(f"{where}:{line}: YAML syntax error: the character U+{ord(char):04X} is not allowed in "
                    "YAML text (a raw control byte such as NUL); remove it") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{where}:{mark.line + 1}" if mark else where
        problem = getattr(exc, "problem", None) or str(exc)
        kind = "YAML error" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
        raise error(f"{at}: {kind}: {preview(problem, 300, quote=False)}") from None
    except ValueError as exc:   # a number with more digits than Python converts
        raise error(f"{where}: a value cannot be read: {preview(str(exc), 120, quote=False)}") from None
    except RecursionError:   # not reachable within MAX_DEPTH; kept so no input ever shows a traceback
        raise error(f"{where}: nested too deeply") from None
