"""The package's layers: a family stands on base, measure, comm and the ground floor, never on
another family, and commbench/comm (the communication floor) imports no family. Imports inside
functions count too: a deferred import ties the two modules together just the same."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "commbench"
FAMILIES = "commbench.families"

# (importing family, imported module or package, why it is still allowed): none today. An entry
# would name the step that removes it, and the test fails once it is no longer used.
EXCEPTIONS: tuple[tuple[str, str, str], ...] = ()


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path = PKG) -> set[str]:
    """Every module a file imports, at any depth of its code, as absolute dotted names
    (``from a import b`` yields a.b where b is a module, else a)."""
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                up = parts[:len(parts) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            for alias in node.names:   # a name that is a module of the package is that module
                sub = f"{base}.{alias.name}"
                out.add(sub if _is_module(sub, root) else base)
    return out


def _is_module(dotted: str, root: Path) -> bool:
    path = root.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def family_of(module: str, root: Path = PKG) -> str | None:
    """The family package a module belongs to (commbench.families.<name>...), else None."""
    parts = module.split(".")
    if parts[:2] != FAMILIES.split(".") or len(parts) < 3:
        return None
    return parts[2] if (root / "families" / parts[2] / "__init__.py").exists() else None


def cross_family_imports(root: Path = PKG) -> list[tuple[str, str, str]]:
    """(importing file, importing family, imported module) for every import of another family."""
    found = []
    for path in sorted((root / "families").glob("*/**/*.py")):
        mine = family_of(_module_name(path, root), root)
        for target in sorted(imported_modules(path, root)):
            theirs = family_of(target, root)
            if mine and theirs and theirs != mine:
                found.append((str(path.relative_to(root.parent)), mine, target))
    return found


def _excused(family: str, target: str) -> bool:
    return any(family == fam and (target == mod or target.startswith(mod + "."))
               for fam, mod, _why in EXCEPTIONS)


def test_no_family_imports_another_family():
    wrong = [f"{where} ({fam}) imports {target}" for where, fam, target in cross_family_imports()
             if not _excused(fam, target)]
    assert not wrong, "a family imports another family (move the shared code to commbench/comm):\n" + \
        "\n".join(wrong)


def test_every_exception_is_still_needed():
    used = cross_family_imports()
    stale = [f"{fam} -> {mod}" for fam, mod, _why in EXCEPTIONS
             if not any(f == fam and (t == mod or t.startswith(mod + ".")) for _w, f, t in used)]
    assert not stale, f"remove these exceptions from EXCEPTIONS, nothing uses them any more: {stale}"


def test_comm_imports_no_family():
    wrong = [f"{path.relative_to(PKG.parent)} imports {target}"
             for path in sorted((PKG / "comm").rglob("*.py"))
             for target in sorted(imported_modules(path))
             if target == FAMILIES or target.startswith(FAMILIES + ".")]
    assert not wrong, "commbench/comm must not import commbench.families:\n" + "\n".join(wrong)


def test_a_deferred_import_of_another_family_is_found(tmp_path):
    root = tmp_path / "commbench"
    for pkg in ("families", "families/a", "families/b"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "families" / "base.py").write_text("")
    (root / "families" / "b" / "helpers.py").write_text("")
    (root / "families" / "a" / "family.py").write_text(
        "from ..base import x\nfrom . import own\n\ndef f():\n    from ..b import helpers\n")
    (root / "families" / "b" / "family.py").write_text("from .. import a\nfrom .helpers import y\n")
    found = {(fam, target) for _where, fam, target in cross_family_imports(root)}
    assert found == {("a", "commbench.families.b.helpers"), ("b", "commbench.families.a")}
