"""`check: bitwise` without MPI: the comparison and first-difference logic on fabricated buffers
(numpy and torch), a nondeterministic op caught, the known answer, the row columns and status,
the suite key, the memory plan and the report's section."""
import textwrap

import numpy as np
import pandas as pd
import pytest
import torch

from commbench.errors import SuiteError
from commbench.measure.collective_memory import collective_plan
from commbench.measure import bitwise
from commbench.measure.state import BitwiseHooks
from commbench.suite.loader import load_suite


def one_rank(x):   # the allgather of a world of one rank
    return [x]


# --- compare: the first differing element, its bits, how many differ --------------------------------

def test_compare_numpy_names_first_element_and_bits():
    ref = np.arange(1, 101, dtype=np.float32)
    got = ref.copy()
    assert bitwise.compare(got, ref) is None
    bitwise.flip_bit(got, 40, 3)
    bitwise.flip_bit(got, 17, 30)
    element, xor, count = bitwise.compare(got, ref)
    assert (element, xor, count) == (17, 1 << 30, 2)


def test_compare_sees_signed_zero_and_nan_payload_that_values_equal():
    ref = torch.tensor([0.0, 1.0, float("nan")], dtype=torch.float32)
    got = ref.clone()
    got[0] = -0.0                                  # equal as a value, not as bits
    assert bool((got[:2] == ref[:2]).all())
    element, xor, count = bitwise.compare(got, ref)
    assert (element, xor, count) == (0, 0x80000000, 1)
    got = ref.clone()
    bitwise.flip_bit(got, 2, 0)                    # another NaN: a value check cannot tell them apart
    assert torch.isnan(got[2])
    assert bitwise.compare(got, ref) == (2, 1, 1)


@pytest.mark.parametrize("dtype,width", [(torch.bfloat16, 16), (torch.float16, 16), (torch.int32, 32),
                                         (torch.float64, 64)])
def test_compare_torch_every_width_and_the_sign_bit(dtype, width):
    ref = torch.arange(1, 65).to(dtype)
    got = ref.clone()
    bitwise.flip_bit(got, 63, width - 1)           # the top bit: torch's integer views are signed
    assert bitwise.compare(got, ref) == (63, 1 << (width - 1), 1)
    d = bitwise.Difference(2, 0, 63, 1 << (width - 1), width, 1, bitwise.FIRST)
    assert d.lowest_bit == width - 1
    assert f"0x{1 << (width - 1):0{width // 4}x}" in d.text(rank=3)


def test_compare_in_chunks_counts_every_difference(monkeypatch):
    monkeypatch.setattr(bitwise, "CHUNK", 7)       # several chunks on a small buffer
    ref = np.arange(50, dtype=np.int32)
    got = ref.copy()
    for e in (9, 10, 48):
        bitwise.flip_bit(got, e, 2)
    assert bitwise.compare(got, ref) == (9, 4, 3)
    # a reference given by chunks (the known answer), cast to the output's type
    assert bitwise.compare(got, lambda a, b: np.arange(a, b, dtype=np.int64)) == (9, 4, 3)


def test_compare_refuses_a_reference_of_another_length():
    with pytest.raises(ValueError, match="reference holds 3"):
        bitwise.compare(np.zeros(4, np.float32), np.zeros(3, np.float32))


# --- a fabricated op: nondeterministic on one rank at one repetition -------------------------------

class FakeOp:
    """An 'all-reduce' whose output is exact unless ``bad`` = (repetition, element, bit) says
    which call returns one bit off (a nondeterministic or corrupting op)."""

    def __init__(self, n=64, dtype=np.float32, bad=None, in_place=True):
        self.n, self.bad, self.calls = n, bad, 0
        self.inputs = np.arange(n, dtype=dtype) % 7 + 1
        self.buf = self.inputs.copy()
        self.in_place = in_place

    def repeat(self):
        self.buf[:] = self.inputs                  # the input restored (an in-place op overwrote it)
        self.buf *= 2                              # "two ranks' sum", in place
        self.calls += 1
        if self.bad and self.bad[0] == self.calls:
            bitwise.flip_bit(self.buf, self.bad[1], self.bad[2])

    def hooks(self, known=True):
        exp = (lambda i, a, b: (np.arange(a, b) % 7 + 1) * 2) if known else None
        return BitwiseHooks(repeat=self.repeat, outputs=lambda: [self.buf], expected=exp,
                            no_expected="" if known else "no exact answer here")


def test_a_deterministic_op_passes_and_the_known_answer_is_compared():
    op = FakeOp()
    res = bitwise.local_pass(op.hooks(), 5, rank=0, allgather=one_rank)
    assert op.calls == 5 and res.differing == [] and res.first is None and res.unknown == ""
    cols = bitwise.row_columns(5, [res], "collectives")
    assert cols == {"bitwise_repeats": 5, "bitwise_mismatch": 0, "bitwise_first": "", "bitwise_note": ""}


def test_nondeterminism_on_one_rank_is_named_rank_repetition_element_bit():
    ranks = [bitwise.local_pass(FakeOp().hooks(), 4, rank=0, allgather=one_rank),
             bitwise.local_pass(FakeOp(bad=(3, 21, 5)).hooks(), 4, rank=1, allgather=one_rank)]
    cols = bitwise.row_columns(4, ranks, "collectives")
    assert cols["bitwise_mismatch"] == 1
    assert cols["bitwise_first"].startswith("rank 1 repetition 3 element 21 bit 5 (bits 0x00000020 differ "
                                            "from repetition 1; 1 element(s) differ)")
    row = {"status": "ok", "reason": ""}
    bitwise.settle(row, 4, ranks, "collectives")
    assert row["status"] == "wrong" and row["reason"].startswith("bitwise: 1 of 4 repetition(s) differ; "
                                                                  "first: rank 1 repetition 3")


def test_a_wrong_first_repetition_is_caught_against_the_known_answer():
    res = bitwise.local_pass(FakeOp(bad=(1, 0, 0)).hooks(), 3, rank=0, allgather=one_rank)
    # repetition 1 differs from the known answer, 2 and 3 (correct) from repetition 1
    assert res.differing == [1, 2, 3]
    assert res.first.against == bitwise.KNOWN and (res.first.repetition, res.first.element) == (1, 0)
    # without a known answer, the same fault shows only as repetitions 2 and 3 differing from it
    res = bitwise.local_pass(FakeOp(bad=(1, 0, 0)).hooks(known=False), 3, rank=0, allgather=one_rank)
    assert res.differing == [2, 3] and res.unknown == "no exact answer here"
    cols = bitwise.row_columns(3, [res], "collectives")
    assert cols["bitwise_note"] == "rank 0: no exact answer here: repetitions compared with each other only"


def test_the_first_difference_is_the_earliest_repetition_then_the_lowest_rank():
    ranks = [bitwise.local_pass(FakeOp(bad=(4, 1, 1)).hooks(), 4, rank=0, allgather=one_rank),
             bitwise.local_pass(FakeOp(bad=(2, 9, 9)).hooks(), 4, rank=1, allgather=one_rank),
             bitwise.local_pass(FakeOp(bad=(2, 3, 3)).hooks(), 4, rank=2, allgather=one_rank)]
    cols = bitwise.row_columns(4, ranks, "collectives")
    assert cols["bitwise_mismatch"] == 2            # repetitions 2 and 4
    assert cols["bitwise_first"].startswith("rank 1 repetition 2 element 9 bit 9")


def test_a_family_without_hooks_keeps_its_row_with_a_note():
    res = bitwise.local_pass(None, 5, rank=0, allgather=one_rank)
    assert not res.checked
    row = {"status": "ok", "reason": ""}
    bitwise.settle(row, 5, [res], "proxy")
    assert row["status"] == "ok" and row["bitwise_mismatch"] is None
    assert "proxy family offers no output view" in row["bitwise_note"]


def test_a_failing_repetition_on_another_rank_stops_every_rank():
    op = FakeOp()
    seen = []

    def gather(x):   # rank 1 of two: rank 0 failed its second repetition
        seen.append(x)
        return [x, x] if len(seen) < 4 else ["RuntimeError: NCCL error", None]

    with pytest.raises(bitwise.BitwiseError, match="repetition 2: rank 0: RuntimeError: NCCL error"):
        bitwise.local_pass(op.hooks(), 5, rank=1, allgather=gather)
    assert op.calls == 2                            # no third op to wait in


def test_injection_variable():
    assert bitwise.injected(0, {}) is None
    assert bitwise.injected(1, {bitwise.INJECT_VAR: "1:2:5:3"}) == (2, 5, 3)
    assert bitwise.injected(0, {bitwise.INJECT_VAR: "1:2:5:3"}) is None
    with pytest.raises(ValueError, match="RANK:REPETITION:ELEMENT:BIT"):
        bitwise.injected(0, {bitwise.INJECT_VAR: "1:2"})
    with pytest.raises(ValueError, match="outside"):
        bitwise.flip_bit(np.zeros(4, np.float32), 4, 0)


def test_the_injected_flip_is_caught(monkeypatch):
    monkeypatch.setenv(bitwise.INJECT_VAR, "0:3:7:12")
    res = bitwise.local_pass(FakeOp().hooks(), 4, rank=0, allgather=one_rank)
    assert res.differing == [3]
    assert (res.first.repetition, res.first.element, res.first.lowest_bit) == (3, 7, 12)


# --- suite key, memory plan ------------------------------------------------------------------------

def _suite(tmp_path, check_line: str, bench_check: str = ""):
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent(f"""\
        name: s
        defaults: {{ranks: 2, sizes: [4KiB]{check_line}}}
        benchmarks:
          - name: a
            family: collectives
            backends: [mpi]
            ops: [all_reduce]
        {bench_check}"""))
    return p


def test_suite_key_check(tmp_path):
    plain = load_suite(_suite(tmp_path, ""), gpu_count=0).cases
    assert [c.bitwise_repeats for c in plain] == [0]
    cases = load_suite(_suite(tmp_path, ", check: bitwise"), gpu_count=0).cases
    assert [c.bitwise_repeats for c in cases] == [bitwise.DEFAULT_REPEATS]
    assert cases[0].case_id == plain[0].case_id     # the same point, checked more closely
    cases = load_suite(_suite(tmp_path, ", check: {mode: bitwise, repeats: 3}"), gpu_count=0).cases
    assert [c.bitwise_repeats for c in cases] == [3]
    over = load_suite(_suite(tmp_path, ", check: bitwise", "    check: values\n"), gpu_count=0).cases
    assert [c.bitwise_repeats for c in over] == [0]  # the benchmark's own wins over defaults


@pytest.mark.parametrize("check,msg", [("bitwize", "unknown check 'bitwize'"),
                                       ("{mode: bitwise, repeats: 1}", "expected a whole number 2..1000"),
                                       ("{mode: bitwise, repeats: true}", "expected a whole number"),
                                       ("{mode: bitwise, count: 3}", "unknown setting"),
                                       ("{mode: values, repeats: 3}", "applies to mode: bitwise only"),
                                       ("[bitwise]", "expected values or bitwise")])
def test_suite_key_check_errors_name_the_line(tmp_path, check, msg):
    with pytest.raises(SuiteError, match=msg) as info:
        load_suite(_suite(tmp_path, f", check: {check}"), gpu_count=0)
    assert "s.yaml:2: benchmarks[0].check" in str(info.value)


def test_memory_plan_holds_the_reference_copy(tmp_path):
    case = load_suite(_suite(tmp_path, ", check: {mode: bitwise, repeats: 3}"), gpu_count=0).cases[0]
    import dataclasses

    case = dataclasses.replace(case, backend="nccl", size_bytes=1 << 30)
    with_ref = dict(collective_plan(case, 2, 0).transient)
    without = dict(collective_plan(dataclasses.replace(case, bitwise_repeats=0), 2, 0).transient)
    assert "bitwise reference" not in without
    assert with_ref["bitwise reference"] >= 1 << 30   # a copy of the 1 GiB result


# --- report ---------------------------------------------------------------------------------------

def test_report_line_counts_points_that_differ():
    from commbench.analysis.report.sections.bitwise import summary_line

    rows = pd.DataFrame({"bitwise_repeats": [3, 3, 3, None], "bitwise_mismatch": [0, 2, None, None],
                         "bitwise_note": ["", "", "not checked", ""]})
    assert summary_line(rows) == ("2 point(s) checked bit for bit (3 repetitions each): 1 differ (each is a "
                                  "`wrong` row); 1 point(s) not checked (their families offer no output view).")


# --- accept ---------------------------------------------------------------------------------------

def test_accept_rule_on_a_run_without_the_check_fails_never_crashes(tmp_path):
    """A rule on bitwise_mismatch over a run that never ran `check: bitwise` fails as an empty
    metric (exit 1), rather than passing or stopping on the missing column."""
    from pathlib import Path

    from click.testing import CliRunner

    from commbench.cli import cli

    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {name: bitwise, select: {family: collectives}, metric: bitwise_mismatch,\n"
                     "     aggregate: max, op: '<=', value: 0}\n")
    run = Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "cpu-base"
    result = CliRunner().invoke(cli, ["accept", str(run), "--rules", str(rules), "--out",
                                      str(tmp_path / "a.html")])
    assert result.exit_code == 1, result.output
    assert "bitwise_mismatch is empty" in result.output


def test_progress_line_says_repetitions_differ():
    from commbench.ui import headline

    row = {"status": "wrong", "time_us": 3.2, "busbw_gbps": 1.0, "wrong": 0, "bitwise_mismatch": 2,
           "bitwise_repeats": 10}
    assert headline(row).endswith("2 of 10 repetitions differ bitwise")
    assert "bitwise" not in headline({**row, "status": "ok", "bitwise_mismatch": 0})
