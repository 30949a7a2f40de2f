"""Small rooms: no module of commbench over 400 lines and no function over 60 (docs/design.md,
"Floors"): a file or function past them has more than one reason to change; split it."""
from __future__ import annotations

import ast

from tests.unit.test_import_cycles import PKG

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _sizes():
    modules, functions = {}, {}
    for path in PKG.rglob("*.py"):
        src = path.read_text()
        name = str(path.relative_to(PKG))
        modules[name] = len(src.splitlines())
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions[f"{name}:{node.lineno} {node.name}"] = node.end_lineno - node.lineno + 1
    return modules, functions


def test_no_module_is_over_400_lines():
    modules, _ = _sizes()
    assert len(modules) > 100
    assert {m: n for m, n in modules.items() if n > MAX_MODULE_LINES} == {}


def test_no_function_is_over_60_lines():
    _, functions = _sizes()
    assert {f: n for f, n in functions.items() if n > MAX_FUNCTION_LINES} == {}
