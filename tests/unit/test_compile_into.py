"""The CUDA kernels (jit.build) and the host C++ libraries (profile/native.build_library) are
compiled by one helper, jit.compile_into: to a temporary name renamed into place, nothing left
behind by a failed build."""
import pytest

from commbench import jit
from commbench.profile import native

FAKE = """#!/bin/sh
# a compiler that writes its -o file, or fails when FAKE_FAIL is set
[ "$1" = --version ] && { echo fake 1.0; exit 0; }
[ -n "$FAKE_FAIL" ] && { echo "error: broken source" >&2; exit 1; }
while [ $# -gt 0 ]; do [ "$1" = -o ] && { printf lib > "$2"; exit 0; }; shift; done
exit 2
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    compiler = tmp_path / "fakecc"
    compiler.write_text(FAKE)
    compiler.chmod(0o755)
    monkeypatch.setenv("COMMBENCH_JIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(jit, "find_nvcc", lambda: str(compiler))
    monkeypatch.setattr(jit, "nvcc_version", lambda: "fake")
    monkeypatch.setattr(native, "find_compiler", lambda: str(compiler))
    return tmp_path / "cache"


def _build_both():
    return [jit.build("timed_loop", arch="sm_90"), native.build_library("nvtx", "libfake.so")]


def test_both_builders_rename_a_whole_library_into_place(fake):
    built = _build_both()
    assert all(p.read_bytes() == b"lib" for p in built), built
    assert not [p for p in fake.rglob(".*") if p.is_file()]   # no temporary left
    target = fake / "direct" / "libx.so"
    target.parent.mkdir()
    assert jit.compile_into(target, lambda out: [jit.find_nvcc(), "-o", out], "x failed") == target
    assert sorted(p.name for p in target.parent.iterdir()) == ["libx.so"]


def test_a_failed_build_leaves_nothing_and_says_why(fake, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "1")
    for build in (lambda: jit.build("timed_loop", arch="sm_90"), lambda: native.build_library("nvtx", "libfake.so")):
        with pytest.raises(jit.JitError, match="broken source"):
            build()
    assert not [p for p in fake.rglob("*") if p.is_file()]
