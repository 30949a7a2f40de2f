"""No import cycle between commbench's modules, nor between its packages, counting imports inside
functions too (a deferred import that breaks a cycle at start-up still ties the two to each other).

At package level a node is a first-level package (``launch``, ``measure``) or a top-level module
(``world``, ``metrics``); ``commbench/__init__.py`` is the node ``__init__``."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "commbench"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def _known(name: str, mods: dict) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _edges(mods: dict) -> dict[str, set[str]]:
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                dep = _known(target, mods)
                if dep and dep != name and not name.startswith(dep + "."):   # a package's own parents
                    deps.add(dep)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_graph_is_read():
    graph = _edges(_modules())
    assert "commbench.runfolder.schema" in graph["commbench.runfolder.writer"]
    assert "commbench.launch.run" in graph


def test_no_import_cycle():
    assert _cycles(_edges(_modules())) == []


# Package pairs allowed to import each other while one is being taken apart, each with the reason
# (docs/design.md names them). None today: an entry whose pair no longer imports both ways fails
# test_allowed_package_pairs_are_still_needed, and any pair not named here fails the check.
TO_BE_REMOVED: dict[frozenset, str] = {}


def package_of(module: str) -> str:
    """commbench.launch.mpiexec -> launch; commbench.world -> world; commbench -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def package_edges(graph: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    graph = _edges(_modules()) if graph is None else graph
    out: dict[str, set[str]] = {}
    for name, deps in graph.items():
        mine = package_of(name)
        out.setdefault(mine, set()).update(p for p in map(package_of, deps) if p != mine)
    return out


def _mutual_pairs(packages: dict[str, set[str]]) -> set[frozenset]:
    return {frozenset({a, b}) for a, deps in packages.items() for b in deps if a in packages.get(b, ())}


def test_package_graph_is_read():
    packages = package_edges()
    assert {"launch", "measure", "world", "safety", "__init__"} <= set(packages)
    assert "safety" in packages["launch"] and "world" in packages["sysinfo"]


def test_no_package_cycle_beyond_the_ones_being_removed():
    packages = package_edges()
    allowed = set(TO_BE_REMOVED)
    pruned = {a: {b for b in deps if frozenset({a, b}) not in allowed} for a, deps in packages.items()}
    assert _cycles(pruned) == [], "packages that import each other (directly or around a loop)"


def test_allowed_package_pairs_are_still_needed():
    stale = set(TO_BE_REMOVED) - _mutual_pairs(package_edges())
    assert not stale, f"these pairs no longer import each other: drop them from TO_BE_REMOVED: {stale}"


def test_the_package_check_fails_on_a_new_pair():
    packages = package_edges()
    packages["world"] = packages["world"] | {"launch"}   # the ground floor reaching up
    pruned = {a: {b for b in deps if frozenset({a, b}) not in TO_BE_REMOVED} for a, deps in packages.items()}
    assert any("world" in comp and "launch" in comp for comp in _cycles(pruned))


def _importers_of(package: str, graph: dict[str, set[str]]) -> set[str]:
    """Modules outside ``package`` that import a module of it (deferred imports included)."""
    inside = lambda m: m == package or m.startswith(package + ".")   # noqa: E731
    return {m for m, deps in graph.items() if not inside(m) and any(inside(d) for d in deps)}


def test_only_the_cli_imports_analysis():
    """analysis (report, compare, accept) sits on top, under the CLI layer (cli.py, commands/): launch
    runs a suite and hands the stored run to
    the caller's finish, profile keeps data functions the report draws; neither imports analysis."""
    importers = _importers_of("commbench.analysis", _edges(_modules()))
    assert "commbench.cli" in importers
    assert {m for m in importers if m != "commbench.cli" and not m.startswith("commbench.commands.")} == set()


def test_the_report_does_not_import_the_families():
    """Parameter columns come from run.json (param_columns), never from importing every family."""
    graph = _edges(_modules())
    report = {m: deps for m, deps in graph.items() if m.startswith("commbench.analysis.report")}
    assert len(report) > 5
    assert {m: sorted(d for d in deps if d.startswith("commbench.families"))
            for m, deps in report.items() if any(d.startswith("commbench.families") for d in deps)} == {}


def test_runfolder_imports_nothing_above_it():
    """runfolder is the one reader and writer of run-folder files: the layers above call it."""
    graph = _edges(_modules())
    above = ("commbench.analysis", "commbench.profile", "commbench.measure", "commbench.launch",
             "commbench.families")
    assert {m: sorted(d for d in deps if d.startswith(above))
            for m, deps in graph.items() if m.startswith("commbench.runfolder")
            and any(d.startswith(above) for d in deps)} == {}
