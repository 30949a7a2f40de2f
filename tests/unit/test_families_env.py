"""No family writes the process environment: NCCL, NVSHMEM and torch read theirs once, at start-up,
so what a rank's libraries see belongs to the launch (Family.launch_env declares what a family
needs; the kill switches are the launch's). An AST scan of every module under commbench/families."""
from __future__ import annotations

import ast
from pathlib import Path

FAMILIES = Path(__file__).resolve().parents[2] / "commbench" / "families"
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def _is_environ(node: ast.AST) -> bool:
    """``os.environ`` or a bare ``environ`` (from os import environ)."""
    return ((isinstance(node, ast.Attribute) and node.attr == "environ")
            or (isinstance(node, ast.Name) and node.id == "environ"))


def env_writes(source: str) -> list[int]:
    """Line numbers where the code writes the process environment."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        if any(isinstance(t, ast.Subscript) and _is_environ(t.value) for t in targets):
            lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            fn = node.func
            if fn.attr in MUTATORS and _is_environ(fn.value):
                lines.append(node.lineno)
            elif fn.attr in ("putenv", "unsetenv") and isinstance(fn.value, ast.Name) and fn.value.id == "os":
                lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("putenv", "unsetenv"):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_scan_sees_every_way_of_writing():
    code = ("import os\nfrom os import environ, putenv\nos.environ['A'] = '1'\nos.environ.update(B='2')\n"
            "os.environ.setdefault('C', '3')\nos.environ.pop('D', None)\nos.putenv('E', '5')\n"
            "environ['F'] = '6'\ndel os.environ['G']\nputenv('H', '8')\nx = os.environ.get('I')\n"
            "y = dict(os.environ)\n")
    assert env_writes(code) == [3, 4, 5, 6, 7, 8, 9, 10]


def test_no_family_writes_the_environment():
    modules = sorted(FAMILIES.rglob("*.py"))
    assert len(modules) > 50
    found = {str(p.relative_to(FAMILIES)): env_writes(p.read_text()) for p in modules}
    assert {k: v for k, v in found.items() if v} == {}
