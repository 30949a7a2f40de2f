"""The floors of the package (docs/design.md, "Floors"): a package imports its own floor and the
floors below it, never one above. And the one rule about the launcher's identity variables: only
world.py and rank.py read them."""
from __future__ import annotations

import ast
import re

from tests.unit.test_import_cycles import PKG, TO_BE_REMOVED, package_edges

# Lowest first. A package or top-level module of commbench sits on exactly one floor.
FLOORS: list[tuple[str, set[str]]] = [
    ("ground", {"__init__", "errors", "dtypes", "units", "procs", "spans", "safety", "world", "jit", "nccl_lib", "ui",
                "sysinfo"}),
    ("runfolder", {"runfolder"}),
    ("comm", {"comm", "metrics"}),
    ("measure", {"measure", "profile"}),
    ("families", {"families"}),
    ("runner", {"runner"}),
    ("suite", {"suite"}),
    ("placement", {"placement"}),
    ("launch", {"launch", "rank"}),
    ("analysis", {"analysis", "verdict"}),
    ("cli", {"cli", "__main__", "commands"}),
]
# Rooms of one floor or of floors apart that must not know each other: what reads stored runs never
# starts one (the commands that start runs live in the CLI layer).
APART: set[tuple[str, str]] = {("analysis", "launch"), ("verdict", "launch")}
LEVEL = {pkg: level for level, (_name, members) in enumerate(FLOORS) for pkg in members}


def upward_imports(packages: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, deps in packages.items() for b in deps if LEVEL[b] > LEVEL[a]}


def test_every_package_is_on_one_floor():
    names = [pkg for _name, members in FLOORS for pkg in members]
    assert len(names) == len(set(names))
    missing = sorted(set(package_edges()) - set(names))
    assert not missing, f"place these on a floor in FLOORS (and in docs/design.md): {missing}"


def test_the_ground_floor_imports_nothing_above_it():
    packages = package_edges()
    ground = FLOORS[0][1]
    up = sorted((a, b) for a, b in upward_imports(packages) if a in ground)
    assert not up, up


def test_no_floor_imports_one_above_it():
    up = {(a, b) for a, b in upward_imports(package_edges()) if frozenset({a, b}) not in TO_BE_REMOVED}
    assert not up, f"imports that reach a higher floor: {sorted(up)}"


def test_analysis_never_imports_launch():
    packages = package_edges()
    crossing = sorted((a, b) for a, b in APART if b in packages.get(a, set()))
    assert not crossing, f"these import what they must not (docs/design.md, Floors): {crossing}"


def test_an_upward_import_is_seen():
    packages = package_edges()
    packages["safety"] = packages["safety"] | {"launch"}
    assert ("safety", "launch") in upward_imports(packages)


# The variables an MPI launcher, PMI/PMIx or Slurm sets to say who a process is and what job it is
# in. SLURM_MPI_TYPE and SLURM_CPUS_PER_TASK are launcher settings (srun options), not identity,
# and PMIX_MCA_ is PMIx's configuration prefix.
IDENTITY = re.compile(r"\b(OMPI_COMM_WORLD_\w*|PMIX?_(?!MCA_)\w*|MPI_LOCALNRANKS|"
                      r"SLURM_(?!MPI_TYPE\b|CPUS_PER_TASK\b)\w*)")
IDENTITY_READERS = {"world.py", "rank.py"}


def identity_names(source: str) -> set[str]:
    """Identity variable names in a module's string literals (docstrings and bare strings aside)."""
    tree = ast.parse(source)
    prose = {id(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return {m.group(1) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
            for m in IDENTITY.finditer(node.value)}


def test_only_world_and_rank_read_launcher_identity():
    readers = {str(path.relative_to(PKG)): sorted(found) for path in PKG.rglob("*.py")
               if (found := identity_names(path.read_text()))}
    assert "world.py" in readers   # the scan sees world.py's own reads
    strays = {path: names for path, names in readers.items() if path not in IDENTITY_READERS}
    assert not strays, f"ask commbench.world instead: {strays}"


def test_an_identity_read_elsewhere_is_seen():
    assert identity_names('import os\nn = os.environ.get("SLURM_JOB_NUM_NODES")\n') == {"SLURM_JOB_NUM_NODES"}
    assert identity_names('import os\nn = os.environ.get("SLURM_MPI_TYPE")\n') == set()
