"""`commbench validate` rejects every value that could only give skipped rows, naming file:line:field.

A value outside its Param (range, choices, check) is an error wherever it appears. A value that
is possible only in some combinations (in_place with an op that has no in-place form) is an
error only when the benchmark has no combination in which it runs: a sweep may cross values,
and the crossed-out Cases stay skipped rows with their reason.
"""
import textwrap

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.errors import SuiteError
from commbench.families import all_families, get_family
from commbench.families.base import Param
from commbench.suite import load_suite


def suite(family: str, body: str) -> str:
    """A one-benchmark suite; ``body`` lines start at line 5."""
    return f"name: t\nbenchmarks:\n  - name: a\n    family: {family}\n" + textwrap.indent(
        textwrap.dedent(body), "    ")


IMPOSSIBLE = [
    # (id, suite text, fragments of the message: line, field, what is wrong)
    ("moe topk 64", suite("moe", "ranks: 2\nsizes: [1MiB]\nparams: {topk: 64}\n"),
     [":7:", "params.topk", "1..32"]),
    ("moe num_sms 0", suite("moe", "ranks: 2\nsizes: [1MiB]\nparams:\n  hidden: 512\n  num_sms: 0\n"),
     [":9:", "params.num_sms", "1..1024"]),
    ("moe hidden 100", suite("moe", "ranks: 2\nparams: {hidden: 100}\n"), [":6:", "params.hidden", "multiple of 8"]),
    ("moe fp8 combine only", suite("moe", "ranks: 2\nsizes: [3670016]\nops: [combine]\ndtypes: [float8_e4m3]\n"),
     [":8:", "dtypes", "'float8_e4m3' never runs", "BF16 only"]),
    ("moe experts not a multiple of ranks", suite("moe", "ranks: 3\nsizes: [3670016]\nparams: {experts: 256}\n"),
     [":7:", "params.experts", "multiple of the ranks"]),
    ("moe size not tokens x hidden", suite("moe", "ranks: 2\nsizes: [1000]\n"),
     [":6:", "sizes", "1000B never runs", "tokens * hidden * 2"]),
    ("moe group routing",
     suite("moe", "ranks: 2\nsizes: [3670016]\nparams: {routing: group, experts: 12, n_group: 8}\n"),
     [":7:", "params.n_group", "multiple of n_group"]),
    ("proxy batch 64", suite("proxy", "params: {batch: 64}\n"), [":5:", "params.batch", "1..32"]),
    ("proxy ring slots", suite("proxy", "params:\n  ring_slots: [4096, 1000]\n"),
     [":6:", "params.ring_slots", "power of two"]),
    ("proxy two ranks", suite("proxy", "ranks: 2\n"), [":5:", "ranks", "2 never runs", "ranks: 1"]),
    ("proxy graph timing", suite("proxy", "timing: graph\n"), [":5:", "timing", "'graph' never runs"]),
    ("proxy chunk for bandwidth", suite("proxy", "ops: [bandwidth]\nparams: {chunk_bytes: 12}\n"),
     [":6:", "params.chunk_bytes", "multiple of 8"]),
    ("nvshmem threads 2000", suite("nvshmem", "ranks: 2\nparams: {threads: 2000}\n"),
     [":6:", "params.threads", "1..1024"]),
    ("nvshmem reps 0", suite("nvshmem", "ranks: 2\nparams: {reps: 0}\n"), [":6:", "params.reps", "1..100000"]),
    ("nvshmem odd ranks", suite("nvshmem", "ranks: 3\nops: [put]\n"), [":5:", "ranks", "odd"]),
    ("nvshmem float atomics", suite("nvshmem", "ranks: 2\nops: [atomic_fetch_add]\ndtypes: [float32]\n"),
     [":7:", "dtypes", "uint64"]),
    ("allreduce num_ctas 0", suite("allreduce", "ranks: 2\nbackends: [cb_one_shot]\nparams: {num_ctas: 0}\n"),
     [":7:", "params.num_ctas", "1..64"]),
    ("allreduce threads 100", suite("allreduce", "ranks: 2\nparams: {threads_per_cta: 100}\n"),
     [":6:", "params.threads_per_cta", "multiple of 32"]),
    ("allreduce peer ranks", suite("allreduce", "ranks: 16\nbackends: [cb_two_shot]\n"),
     [":5:", "ranks", "at most 8 ranks"]),
    ("collectives in-place alltoall", suite("collectives", "ranks: 2\nops: [alltoall]\nparams: {in_place: true}\n"),
     [":7:", "params.in_place", "True never runs"]),
    ("collectives mpi bf16", suite("collectives", "ranks: 2\nbackends: [mpi]\ndtypes: [bfloat16]\n"),
     [":7:", "dtypes", "MPI has no bfloat16"]),
]


@pytest.mark.parametrize("desc,text,fragments", IMPOSSIBLE, ids=[i[0] for i in IMPOSSIBLE])
def test_validate_rejects_values_that_never_run(tmp_path, desc, text, fragments):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(SuiteError) as exc:
        load_suite(path, gpu_count=16)   # two 8-GPU nodes: the launcher may start 16 ranks
    msg = str(exc.value)
    assert f"{path}:" in msg
    for frag in fragments:
        assert frag in msg, (frag, msg)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output


def test_a_value_possible_in_some_combinations_leaves_skipped_cases(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(suite("collectives", "ranks: 2\nops: [all_reduce, alltoall]\nparams: {in_place: [true, false]}\n"
                                         "sizes: [1KiB]\n"))
    s = load_suite(path, gpu_count=8)
    fam = get_family("collectives")
    skipped = [c for c in s.cases if fam.unsupported(c)]
    assert [(c.op, c.param("in_place")) for c in skipped] == [("alltoall", True)]
    assert "no in-place form" in fam.unsupported(skipped[0])


def test_every_bounded_param_rejects_a_value_outside_its_range():
    """The declared ranges are what `validate` applies: one value past each bound fails."""
    checked = 0
    for fam in all_families().values():
        for name, spec in fam.params.items():
            assert spec.problem(name, spec.default) is None, (fam.name, name)
            lo, hi = spec.range or (None, None)
            for bad in ([lo - 1] if lo is not None else []) + ([hi + 1] if hi is not None else []):
                assert f"{name} must be" in fam.bench_problems({"params": {name: bad}})[0][1]
                checked += 1
    assert checked >= 20


def test_param_problem_messages():
    p = Param(4, (int,), "x", range=(1, 8), check=lambda v: None if v % 2 == 0 else "must be even")
    assert p.problem("n", 4) is None
    assert p.problem("n", 0) == "n must be 1..8, got 0"
    assert p.problem("n", 3) == "n must be even, got 3"
    assert p.problem("n", True).startswith("expected int")
    assert Param("a", (str,), "x", choices=("a", "b")).problem("s", "c") == "'c' not in ['a', 'b']"
