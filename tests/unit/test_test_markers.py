"""The test tree's own rules: every GPU test file marks all its tests `gpu` (module pytestmark), and
the markers `make test` leaves out are the ones pyproject.toml declares."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_FILES = sorted((ROOT / "tests" / "gpu").glob("test_*.py"))


def _module_marks(path: Path) -> str:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            return ast.get_source_segment(path.read_text(), node) or ""
    return ""


@pytest.mark.parametrize("path", GPU_FILES, ids=lambda p: p.name)
def test_every_gpu_test_file_is_marked_gpu(path):
    assert re.search(r"\bpytest\.mark\.gpu\b", _module_marks(path)), \
        f"{path.relative_to(ROOT)}: add `pytestmark = pytest.mark.gpu` (or put it in its pytestmark list)"


def test_the_markers_make_test_leaves_out_are_declared():
    makefile = (ROOT / "Makefile").read_text()
    left_out = re.search(r"^SLOW_TESTS := (.+)$", makefile, re.M).group(1).split(" or ")
    declared = set(re.findall(r'"(\w+): ', (ROOT / "pyproject.toml").read_text().split("markers = [", 1)[1]
                              .split("]", 1)[0]))
    assert set(left_out) <= declared and {"mpi", "gpu", "slurm", "cluster", "browser", "install"} <= set(left_out)
