"""The harness family has no memory plan: its Cases allocate nothing on a GPU that their sizes or
params scale (the mpi ops none at all, `overlap` two streams and one-thread spin kernels)."""
from __future__ import annotations

import textwrap

from commbench.families import get_family
from commbench.suite.loader import load_suite


def test_harness_cases_have_no_plan(tmp_path):
    suite = tmp_path / "h.yaml"
    suite.write_text(textwrap.dedent("""\
        name: h
        benchmarks:
          - {name: control, family: harness, backends: [mpi], ops: [barrier, spin], sizes: [1KiB, 1GiB]}
          - {name: timeline, family: harness, backends: [cuda], ops: [overlap], sizes: [4]}
        """))
    cases = load_suite(suite, gpu_count=1, overrides={"ranks": 1}).cases
    assert {c.op for c in cases} == {"barrier", "spin", "overlap"}
    fam = get_family("harness")
    assert all(fam.memory_bytes(c, 1) is None for c in cases)
