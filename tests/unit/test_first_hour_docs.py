"""What a new user types from the README and results/README.md works as written: the Python of
results/README.md runs, "Using it" reaches commbench, `make demo` says how, the install lines
name something that exists, and the package metadata builds without deprecation banners."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "tests" / "fixtures" / "runs"


def _blocks(text: str, lang: str = "") -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_results_readme_python_runs_against_a_run_folder(tmp_path, monkeypatch, capsys):
    text = (REPO / "results" / "README.md").read_text()
    snippets = _blocks(text, "python")
    assert snippets, "results/README.md shows how to read a run in Python"
    for folder in set(re.findall(r"results/(\d{8}T\d{6}Z-[\w-]+)", "".join(snippets))):
        shutil.copytree(RUNS / "cpu-base", tmp_path / "results" / folder)
    monkeypatch.chdir(tmp_path)
    for code in snippets:
        scope: dict = {}
        exec(compile(code, "results/README.md", "exec"), scope)   # the doc's own code
        assert len(scope["df"]) > 0 and not scope["samples"].empty and scope["meta"]["suite"]
    assert "rows;" in capsys.readouterr().out


def _venv_bin() -> Path | None:
    bin_dir = Path(sys.prefix) / "bin"
    ok = sys.prefix != sys.base_prefix and (bin_dir / "activate").is_file() and (bin_dir / "commbench").is_file()
    return bin_dir if ok else None


@pytest.mark.skipif(_venv_bin() is None, reason="tests run outside a virtual environment holding commbench")
def test_using_it_lines_work_as_written_in_a_fresh_shell(tmp_path):
    """A shell without the venv on PATH, in a checkout whose .venv is this one: the first lines of
    "Using it" (up to validate) must run as typed."""
    block = _blocks(_section((REPO / "README.md").read_text(), "Using it"))[0]
    lines = [ln.split("#")[0].strip() for ln in block.splitlines()]
    wanted = []
    for ln in lines:
        if ln:
            wanted.append(ln)
        if ln.startswith("commbench validate"):
            break
    assert any(ln.startswith("commbench list") for ln in wanted), wanted
    (tmp_path / ".venv").symlink_to(_venv_bin().parent)
    (tmp_path / "suites").symlink_to(REPO / "suites")
    path = ":".join(p for p in os.environ.get("PATH", "").split(":")
                    if p and Path(p).resolve() != _venv_bin().resolve())
    env = {**os.environ, "PATH": path, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
    env.pop("VIRTUAL_ENV", None)
    script = "set -e\n" + "\n".join(f"{ln} >/dev/null" for ln in wanted)
    res = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_demo_ends_by_saying_how_to_reach_commbench(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "commbench").write_text("#!/bin/sh\necho \"commbench $*\"\nexit 1\n")
    (fake / "commbench").chmod(0o755)
    res = subprocess.run(["make", "-s", "-C", str(REPO), "demo", f"BIN={fake}", "-o", ".venv/.installed"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode != 0, "the run's exit status is kept"
    tail = res.stdout.strip().splitlines()[-3:]
    assert any(f". {fake}/activate" in ln for ln in tail) and any(f"{fake}/commbench" in ln for ln in tail), res.stdout


def test_install_lines_name_what_exists():
    """commbench is not on PyPI: no doc may tell a user to `pip install commbench`."""
    for doc in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = doc.read_text()
        assert not re.search(r"pip install '?commbench\b", text), doc
    install = _section((REPO / "README.md").read_text(), "Install")
    assert "pip install -e ." in install and "'.[torch,mpi]'" in install
    cluster = _section((REPO / "README.md").read_text(), "Installing on a GPU cluster")
    for needed in ("--no-binary mpi4py", "MPICC=", "cu12", "cu13", "shared filesystem"):
        assert needed in cluster, needed


def test_readme_mpiexec_lines_carry_the_flags_commbench_adds():
    text = (REPO / "README.md").read_text()
    typed = [ln for ln in text.splitlines() if re.match(r"\s*`?mpiexec -n", ln)]
    assert typed and all("--bind-to none" in ln for ln in typed), typed
    assert "--allow-run-as-root" in text and "--oversubscribe" in text


def test_license_metadata_is_an_spdx_string():
    """setuptools >= 77 warns (a banner per build, twice per editable install) on a license table."""
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert isinstance(meta["project"]["license"], str)
    req = [r for r in meta["build-system"]["requires"] if r.startswith("setuptools")]
    assert req and int(re.search(r">=(\d+)", req[0]).group(1)) >= 77
