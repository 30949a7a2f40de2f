"""`check: bitwise` through the CLI: 2 ranks on the mpi and gloo backends under mpiexec. A clean
run repeats every Case bit for bit (accept's rule passes, the report says so); a bit flipped on
one rank at one repetition (COMMBENCH_TEST_BITFLIP, tests only) is named by rank, repetition,
element and bit, the row is wrong, `run` exits 1 and the accept rule fails."""

import pytest
from click.testing import CliRunner

from commbench.cli import cli
from commbench.measure.bitwise import INJECT_VAR
from commbench.runfolder.reader import load
from tests.conftest import needs_mpi

pytestmark = needs_mpi

SUITE = """\
name: bitwise
defaults: {ranks: 2, warmup: 1, iters: 3, timeout_s: 60, sizes: [4KiB, 96KiB], check: {mode: bitwise, repeats: 3}}
benchmarks:
  - name: mpi
    family: collectives
    backends: [mpi]
    ops: [all_reduce, all_gather, reduce_scatter, reduce, alltoall]
    dtypes: [float32, int32]
    params: {in_place: [false, true]}
  - name: gloo
    family: collectives
    backends: [gloo]
    ops: [all_reduce, all_gather, reduce_scatter, broadcast]
    dtypes: [float32, bfloat16]
    params: {in_place: [false, true]}
"""

RULES = """\
rules:
  - name: bitwise-repeatable
    select: {family: collectives}
    metric: bitwise_mismatch
    aggregate: max
    op: "<="
    value: 0
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bitwise")
    (tmp / "s.yaml").write_text(SUITE)
    (tmp / "rules.yaml").write_text(RULES)
    return tmp


def _run(folder, name, *extra):
    out = folder / name
    result = CliRunner().invoke(cli, ["run", str(folder / "s.yaml"), "--out", str(out), "--quiet", *extra])
    return out, result


def test_clean_run_repeats_bit_for_bit_on_mpi_and_gloo(folder):
    out, result = _run(folder, "clean")
    assert result.exit_code == 0, result.output
    df = load(out)
    measured = df[df.status == "ok"]
    assert set(measured.backend) == {"mpi", "gloo"}
    assert (df.status.isin(["ok", "skipped"])).all(), df[df.status != "ok"][["op", "reason"]].to_string()
    assert (measured.bitwise_repeats == 3).all() and (measured.bitwise_mismatch == 0).all()
    assert (measured.wrong == 0).all()
    # the known answer was compared wherever it is exact; bfloat16 sums of 2 ranks are exact too
    assert measured.bitwise_note.isna().all(), measured.bitwise_note.unique()
    accepted = CliRunner().invoke(cli, ["accept", str(out), "--rules", str(folder / "rules.yaml")])
    assert accepted.exit_code == 0, accepted.output
    report = (out / "report.md").read_text()
    assert "## Bitwise repeatability" in report
    assert "every repetition identical on every rank" in report


def test_a_flipped_bit_is_named_and_fails_run_and_accept(folder, monkeypatch):
    monkeypatch.setenv(INJECT_VAR, "1:2:5:3")   # rank 1, repetition 2, element 5, bit 3
    out, result = _run(folder, "flipped", "--only", "gloo", "--set", "ops=[all_reduce]",
                       "--set", "sizes=[4KiB]")
    assert result.exit_code == 1, result.output
    df = load(out)
    assert len(df) == 4 and (df.status == "wrong").all(), df[["op", "status", "reason"]].to_string()
    assert (df.wrong == 0).all()                 # the values were right: only the repetition differs
    assert (df.bitwise_mismatch == 1).all()
    for first in df.bitwise_first:
        assert first.startswith("rank 1 repetition 2 element 5 bit 3 (bits 0x")
    assert df.reason.str.startswith("bitwise: 1 of 3 repetition(s) differ; first: rank 1 repetition 2").all()
    accepted = CliRunner().invoke(cli, ["accept", str(out), "--rules", str(folder / "rules.yaml")])
    assert accepted.exit_code == 1, accepted.output
    assert "bitwise: 1 of 3" in accepted.output
    report = (out / "report.md").read_text()
    assert "Points whose repetitions differ" in report and "rank 1 repetition 2 element 5 bit 3" in report
