"""`commbench validate` rejects every value that could only give skipped rows, naming file:line:field.

A value outside its Param (range, choices, check) is an error wherever it appears. A value that
is possible only in some combinations (in_place with an op that has no in-place form) is an
error only when the benchmark has no combination in which it runs: a sweep may cross values,
and the crossed-out Cases stay skipped rows with their reason.
"""
import importlib
import re
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


# --- every numeric Param says what values run --------------------------------------------------

def test_a_numeric_param_without_a_range_or_a_reason_fails_when_defined():
    with pytest.raises(ValueError, match="needs choices, range"):
        Param(1, (int,), "a count")
    with pytest.raises(ValueError, match="needs choices, range"):
        Param(1, (int,), "a count", range=(1, None))          # one side open, no reason given
    with pytest.raises(ValueError, match="needs choices, range"):
        Param(0.5, (float, int), "a fraction")
    with pytest.raises(ValueError, match="own default is refused"):
        Param(0, (int,), "a count", range=(1, 8))
    with pytest.raises(ValueError, match="empty"):
        Param(4, (int,), "a count", range=(8, 1))
    assert Param(1, (int,), "a count", range=(1, 8)).range_text() == "1..8"
    assert Param(1, (int,), "a rank", range=(0, None), why_unbounded="checked against the ranks")
    assert Param(1, (int,), "a flag", choices=(0, 1))
    assert Param(True, (bool,), "a switch") and Param("a", (str,), "a name")   # not numeric


def test_a_family_module_with_an_unbounded_numeric_param_fails_at_import(tmp_path, monkeypatch):
    (tmp_path / "new_family_params.py").write_text(textwrap.dedent("""\
        from commbench.families.base import Param
        PARAMS = {"chunks": Param(4, (int,), "chunks per message")}
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="chunks per message.*needs choices, range"):
        importlib.import_module("new_family_params")


NUMERIC = [(fam.name, name, spec) for fam in all_families().values()
           for name, spec in fam.params.items() if spec.numeric]


def test_every_numeric_param_has_a_range_choices_or_a_reason():
    assert len(NUMERIC) >= 45
    for fam, name, spec in NUMERIC:
        lo, hi = spec.range or (None, None)
        assert spec.choices is not None or (lo is not None and hi is not None) or spec.why_unbounded, (fam, name)


def test_list_shows_every_numeric_params_values():
    result = CliRunner().invoke(cli, ["list"], env={"COLUMNS": "1000"})
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if line.count("│") >= 3}
    for fam, name, spec in NUMERIC:
        text = spec.values_text()
        assert text and text in result.output, (fam, name, text)
        if spec.range is not None:
            assert f"range {spec.range_text()}" in text
    assert "range 1..32" in rows["params.topk"] and "unbounded: " in rows["params.bucket_params"]


# --- an impossible value is blamed on its own line -----------------------------------------------
# Held out from the table above: values a user could type (a typo, a value from another model),
# each in a benchmark whose other keys are fine, and the one problem must name the line and the
# field of the value that is wrong, also when the check involves other parameters.

OWN_LINE = [
    # (id, family, benchmark body, the key whose line and field must be blamed, message fragment)
    ("moe tokens negative", "moe", "ranks: 2\nops: [layer]\nparams:\n  tokens: -5\n", "params.tokens",
     "0..32768"),
    ("moe intermediate not a multiple of 8", "moe", "ranks: 2\nops: [layer]\nparams:\n  tokens: 64\n"
     "  intermediate: 12\n", "params.intermediate", "multiple of 8"),
    ("moe zipf exponent negative", "moe", "ranks: 2\nsizes: [1MiB]\nparams:\n  hidden: 512\n  routing: zipf\n"
     "  zipf_s: -1\n", "params.zipf_s", "0..10"),
    ("moe seed negative", "moe", "ranks: 2\nsizes: [1MiB]\nparams:\n  hidden: 512\n  seed: -1\n",
     "params.seed", "0..4294967295"),
    ("moe topk_group above n_group", "moe", "ranks: 2\nsizes: [3670016]\nparams:\n  routing: group\n"
     "  n_group: 4\n  topk_group: 6\n", "params.topk_group", "exceeds n_group"),
    ("moe topk past the kept groups", "moe", "ranks: 2\nsizes: [3670016]\nparams:\n  routing: group\n"
     "  experts: 16\n  n_group: 8\n  topk_group: 2\n  topk: 8\n", "params.topk", "topk (8) exceeds the 4"),
    ("moe fp8 hidden", "moe", "ranks: 2\nops: [dispatch]\ndtypes: [float8_e4m3]\nsizes: [66560]\n"
     "params:\n  hidden: 520\n", "params.hidden", "multiple of 128"),
    ("moe deepep_ll hidden", "moe", "ranks: 2\nops: [layer]\nbackends: [deepep_ll]\nparams:\n  tokens: 64\n"
     "  hidden: 1024\n", "params.hidden", "low-latency kernels are built for hidden"),
    ("moe deepep ranks", "moe", "ranks: 3\nops: [layer]\nbackends: [deepep]\nparams:\n  experts: 6\n"
     "  topk: 2\n  tokens: 64\n", "ranks", "not 3"),
    ("moe layer two_batch of one token", "moe", "ranks: 2\nops: [layer]\nparams:\n  overlap: two_batch\n"
     "  tokens: 1\n", "params.tokens", ">= 2 tokens"),
    ("moe layer low-latency tokens", "moe", "ranks: 2\nops: [layer]\nbackends: [ipc_ll]\nparams:\n"
     "  tokens: 20000\n", "params.tokens", "at most 12288 tokens"),
    ("moe layer GEMM loop in a graph", "moe", "ranks: 2\nops: [layer]\ntiming: graph\nparams:\n  tokens: 64\n"
     "  gemm: loop\n", "params.gemm", "no CUDA graph"),
    ("moe max_tokens past shared memory", "moe", "ranks: 2\nsizes: [1MiB]\nbackends: [ipc_ll]\nparams:\n"
     "  hidden: 512\n  max_tokens: 20000\n", "params.max_tokens", "0..12288"),
    ("proxy chunk_bytes 0", "proxy", "ops: [bandwidth]\nparams:\n  chunk_bytes: 0\n", "params.chunk_bytes",
     "8.."),
    ("proxy ce_batch -1", "proxy", "params:\n  ce_batch: -1\n", "params.ce_batch", "not in [0, 1]"),
    ("proxy cmds_per_producer 0", "proxy", "ops: [rate]\nparams:\n  cmds_per_producer: 0\n",
     "params.cmds_per_producer", "1..1048576"),
    ("proxy producers past the limit", "proxy", "ops: [rate]\nparams:\n  warps_per_cta: 32\n"
     "  num_ctas: 256\n", "params.num_ctas", "at most 4096 producers"),
    ("training layers 1e9", "training", "ops: [fsdp]\nparams:\n  model: tiny\n  layers: 1000000000\n",
     "params.layers", "1..256"),
    ("training tokens_per_rank 1e12", "training", "ops: [fsdp]\nparams:\n  model: tiny\n"
     "  tokens_per_rank: 1000000000000\n", "params.tokens_per_rank", "1..262144"),
    ("training heads negative", "training", "ops: [fsdp]\nparams:\n  model: tiny\n  heads: -4\n",
     "params.heads", "0..1024"),
    ("training kv_heads not dividing heads", "training", "ops: [fsdp]\nparams:\n  model: tiny\n"
     "  kv_heads: 3\n", "params.kv_heads", "multiple of kv_heads (3)"),
    ("training replicate not dividing the ranks", "training", "ops: [fsdp]\nranks: 4\nparams:\n  model: tiny\n"
     "  replicate: 3\n", "params.replicate", "must divide the ranks"),
    ("harness victim beyond the ranks", "harness", "ops: [crash]\nranks: 2\nparams:\n  victim_rank: 5\n",
     "params.victim_rank", "not one of the 2 rank(s)"),
    ("harness negative spin", "harness", "ops: [spin]\nparams:\n  spin_ns_per_byte: -1\n",
     "params.spin_ns_per_byte", "0..1000"),
    ("interference gemm_m 0", "interference", "ranks: 2\nparams:\n  gemm_m: 0\n", "params.gemm_m", "1..65536"),
    ("nvshmem num_ctas 0", "nvshmem", "ranks: 2\nparams:\n  num_ctas: 0\n", "params.num_ctas", "1..4096"),
]


def _line_of(text: str, key: str) -> int:
    """1-based line of the suite key (``params.NAME``: the NAME line) in ``text``; it occurs once."""
    name = key.split(".")[-1]
    hits = [i for i, line in enumerate(text.splitlines(), 1) if re.match(rf"\s*{re.escape(name)}:", line)]
    assert len(hits) == 1, (key, hits)
    return hits[0]


@pytest.mark.parametrize("desc,family,body,key,fragment", OWN_LINE, ids=[c[0] for c in OWN_LINE])
def test_an_impossible_value_is_blamed_on_its_own_line(tmp_path, desc, family, body, key, fragment):
    text = suite(family, body)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(SuiteError) as exc:
        load_suite(path, gpu_count=16)
    problems = [line.strip() for line in str(exc.value).splitlines()[1:]]
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}:{_line_of(text, key)}: benchmarks[0] (a).{key}: "), problems[0]
    assert fragment in problems[0], (fragment, problems[0])


def test_each_wrong_value_of_a_benchmark_is_blamed_on_its_line(tmp_path):
    """Two wrong parameters of one benchmark: two problems, each with its own line."""
    text = suite("moe", "ranks: 2\nops: [layer]\nparams:\n  tokens: -5\n  overlap: none\n  intermediate: 12\n")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(SuiteError) as exc:
        load_suite(path, gpu_count=8)
    msg = str(exc.value)
    assert f"{path}:{_line_of(text, 'params.tokens')}: benchmarks[0] (a).params.tokens:" in msg
    assert f"{path}:{_line_of(text, 'params.intermediate')}: benchmarks[0] (a).params.intermediate:" in msg
    assert f":{_line_of(text, 'ops')}:" not in msg
