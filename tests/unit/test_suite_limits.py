"""Bounded expansion (issue 21, item 3): Cases per suite, ranks per launch, sweep lengths, file size
and alias expansion are capped before anything large is built; each refusal names the limit and
how to lift it; a value listed twice is an error."""
from __future__ import annotations

import time
import tracemalloc

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.errors import SuiteError
from commbench.suite import load_suite
from commbench.suite.limits import DEFAULT_MAX_CASES, MIN_RANK_SLOTS, SuiteLimits, launcher_slots

SUITE = """name: s
defaults: {{ranks: 2, warmup: 1, iters: 2}}
benchmarks:
  - {{name: b, family: collectives, backends: [mpi], ops: [all_reduce], {extra}}}
"""


def suite(tmp_path, extra: str, text: str | None = None):
    p = tmp_path / "s.yaml"
    p.write_text(text if text is not None else SUITE.format(extra=extra))
    return p


def refused(path, *needles, **kw):
    with pytest.raises(SuiteError) as info:
        load_suite(path, gpu_count=0, **kw)
    for n in needles:
        assert n in str(info.value), str(info.value)
    assert len(str(info.value)) < 4000
    return str(info.value)


@pytest.mark.parametrize("sizes, points", [
    ("{min: 1, max: 1GiB, step: 1}", "1073741824 sizes"),          # was a MemoryError
    ("{min: 1, max: 1GiB, factor: 1.0000001}", "sizes, more than"),  # was minutes of looping
    ("{min: 4, max: 4MiB, step: 4}", "1048576 sizes"),               # was 1 M Cases in 34 s
])
def test_long_sweeps_are_refused_before_they_are_built(tmp_path, sizes, points):
    t0 = time.time()
    tracemalloc.start()
    refused(suite(tmp_path, f"sizes: {sizes}"), points, "--max-cases", ".yaml:4:")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.time() - t0 < 5 and peak < 50 * 2**20


def test_case_cap_counts_the_whole_suite_and_lifts_with_max_cases(tmp_path):
    # 3 ops x 20 sizes x 4 timings = 240 Cases per benchmark, two benchmarks
    text = """name: s
defaults: {ranks: 2, warmup: 1, iters: 2, sizes: {min: 1KiB, max: 512MiB, factor: 2},
           timing: [auto, events, pipelined, host]}
benchmarks:
  - {name: a, family: collectives, backends: [mpi], ops: [all_reduce, broadcast, reduce]}
  - {name: b, family: collectives, backends: [gloo], ops: [all_reduce, broadcast, reduce]}
"""
    path = suite(tmp_path, "", text)
    assert len(load_suite(path, gpu_count=0).cases) == 480
    msg = refused(path, "more than 300 Cases", "--max-cases N", limits=SuiteLimits(max_cases=300))
    assert "s.yaml:6:" in msg   # the benchmark that crosses the limit
    assert len(load_suite(path, gpu_count=0, limits=SuiteLimits(max_cases=480)).cases) == 480


def test_env_variant_products_are_counted_before_they_are_built(tmp_path):
    env = ", ".join(f"NCCL_X{i}: [a, b]" for i in range(40))   # 2**40 launch variants
    t0 = time.time()
    refused(suite(tmp_path, f"env: {{{env}}}"), "Cases (limit --max-cases")
    assert time.time() - t0 < 5


def test_ranks_beyond_the_launcher_are_refused_unless_allowed(tmp_path, monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS", "SLURM_NPROCS",
                "SLURM_JOB_NUM_NODES", "COMMBENCH_HOSTS"):
        monkeypatch.delenv(var, raising=False)
    slots, how = launcher_slots(0)
    allowed = max(slots, MIN_RANK_SLOTS)
    path = suite(tmp_path, "", SUITE.format(extra="sizes: [8B]").replace("ranks: 2", "ranks: 10000"))
    refused(path, "10000 ranks is more than", f"the {allowed} this launcher", "--max-ranks N")
    assert load_suite(path, gpu_count=0, limits=SuiteLimits(max_ranks=10000)).cases[0].ranks == 10000
    monkeypatch.setenv("SLURM_NTASKS", "16384")   # an allocation that can start them
    assert load_suite(path, gpu_count=0).cases[0].ranks == 10000
    monkeypatch.delenv("SLURM_NTASKS")
    big = suite(tmp_path, "", SUITE.format(extra="sizes: [8B], ranks_per_node: 100000"))
    refused(big, "ranks_per_node", "100000 ranks")


def test_validate_flags_lift_the_limits(tmp_path):
    text = SUITE.format(extra="sizes: {min: 1, max: 64, step: 1}").replace("ranks: 2", "ranks: 9999")
    path = suite(tmp_path, "", text)
    r = CliRunner().invoke(cli, ["validate", str(path)])
    assert r.exit_code == 2 and "--max-ranks" in r.output
    r = CliRunner().invoke(cli, ["validate", str(path), "--max-ranks", "9999", "--max-cases", "10"])
    assert r.exit_code == 2 and "more than the 10 Cases" in r.output
    r = CliRunner().invoke(cli, ["validate", str(path), "--max-ranks", "9999", "--max-cases", "64"])
    assert r.exit_code == 0 and "64 cases" in r.output, r.output
    assert str(DEFAULT_MAX_CASES) in CliRunner().invoke(cli, ["validate", "--help"]).output


@pytest.mark.parametrize("extra, what", [
    ("sizes: [8B], ops: [all_reduce, all_reduce], backends: [mpi]", "'all_reduce' is listed twice"),
    ("sizes: [8B], ops: [all_reduce], backends: [mpi, mpi]", "'mpi' is listed twice"),
    ("sizes: [8B], dtypes: [float32, float32]", "'float32' is listed twice"),
    ("sizes: [8B], timing: [host, host]", "'host' is listed twice"),
    ("sizes: [8B], ranks: [2, 2]", "2 is listed twice"),
    ("sizes: [8B, 8B]", "listed twice"),
    ("sizes: [1KiB, 1024]", "listed twice"),                         # two spellings of one size
    ("sizes: [8B], params: {in_place: [true, true]}", "true is listed twice".replace("true", "True")),
    ("sizes: [8B], env: {NCCL_ALGO: [Ring, Ring]}", "'Ring' is listed twice"),
])
def test_duplicate_list_entries_are_errors(tmp_path, extra, what):
    if "ops:" not in extra:
        extra += ", ops: [all_reduce], backends: [mpi]"
    text = SUITE.replace("backends: [mpi], ops: [all_reduce], ", "").format(extra=extra)
    refused(suite(tmp_path, "", text), what, ".yaml:")


def test_the_same_case_twice_under_two_spellings_is_an_error(tmp_path):
    """ranks `all` resolves to the GPU count: with 2 GPUs, [all, 2] names one Case twice."""
    path = suite(tmp_path, "sizes: [8B], ranks: [all, 2]")
    with pytest.raises(SuiteError) as info:
        load_suite(path, gpu_count=2)
    assert "same Case" in str(info.value) and "s.yaml:4:" in str(info.value)
    assert len(load_suite(path, gpu_count=4).cases) == 2


def test_file_size_and_alias_limits_name_their_variable(tmp_path, monkeypatch):
    big = tmp_path / "big.yaml"
    big.write_text(SUITE.format(extra="sizes: [8B]") + "#" * (1024 * 1024) + "\n")
    r = CliRunner().invoke(cli, ["validate", str(big)])
    assert r.exit_code == 2 and "COMMBENCH_MAX_YAML_BYTES" in r.output
    monkeypatch.setenv("COMMBENCH_MAX_YAML_BYTES", str(4 * 1024 * 1024))
    assert CliRunner().invoke(cli, ["validate", str(big)]).exit_code == 0
    many = ", ".join(["8B"] * 1) + "".join(f", {i + 9}B" for i in range(300))
    path = suite(tmp_path, f"sizes: [{many}]")
    monkeypatch.setenv("COMMBENCH_MAX_YAML_NODES", "100")
    r = CliRunner().invoke(cli, ["validate", str(path)])
    assert r.exit_code == 2 and "more than 100 values" in r.output and "COMMBENCH_MAX_YAML_NODES" in r.output
