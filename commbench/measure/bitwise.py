"""Bitwise repeatability (a suite's ``check: bitwise``, docs/suites.md): after the values check, a
Case's op runs N more times on identical inputs; every rank compares its output bit for bit with
its first repetition, and the first repetition with the exact known answer where the family has
one (measure/state.BitwiseHooks). A difference names the rank, the repetition, the first
differing element, its lowest differing bit and the XOR of the two elements' bits.

Outputs are compared where they live: a GPU op's on the device (one reference copy of its
outputs, compared in chunks through integer views of the same width, so NaN payloads and signed
zeros count and no large buffer goes to the host), a host op's in host memory. Each repetition
ends with an agreement over MPI, so a rank that fails stops every rank before the next op.

Row columns (docs/results.md): bitwise_repeats, bitwise_mismatch, bitwise_first, bitwise_note.
"""
from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field

CHUNK = 1 << 26            # elements compared at a time: bounded temporaries on an 8 GiB buffer
DEFAULT_REPEATS = 10       # `check: bitwise` without a count
MAX_REPEATS = 1000
# Tests only (tests/unit/test_bitwise_*.py): "RANK:REPETITION:ELEMENT:BIT" flips that bit of that
# rank's output 0 after that repetition, as a corrupting or nondeterministic op would.
INJECT_VAR = "COMMBENCH_TEST_BITFLIP"
COLUMNS = ("bitwise_repeats", "bitwise_mismatch", "bitwise_first", "bitwise_note")
FIRST = "repetition 1"
KNOWN = "the known answer"


class BitwiseError(RuntimeError):
    """The bitwise pass could not go on: raised on every rank together, the Case's row fails."""


@dataclass(frozen=True)
class Difference:
    """The first element of one output that differs from its reference in one repetition."""

    repetition: int   # 1-based
    output: int       # index in BitwiseHooks.outputs()
    element: int
    xor: int          # the XOR of the two elements' bits, unsigned
    width_bits: int
    count: int        # elements of that output that differ in that repetition
    against: str      # FIRST or KNOWN

    @property
    def lowest_bit(self) -> int:
        return (self.xor & -self.xor).bit_length() - 1

    def text(self, rank: int, outputs: int = 1) -> str:
        where = f" output {self.output}" if outputs > 1 else ""
        return (f"rank {rank} repetition {self.repetition}{where} element {self.element} bit {self.lowest_bit} "
                f"(bits 0x{self.xor:0{max(1, self.width_bits // 4)}x} differ from {self.against}; "
                f"{self.count} element(s) differ)")


@dataclass
class RankResult:
    """One rank's bitwise pass (picklable: it travels to rank 0)."""

    rank: int
    checked: bool = True
    differing: list[int] = field(default_factory=list)   # repetitions (1-based) that differ here
    first: Difference | None = None
    outputs: int = 1
    unknown: str = ""   # why repetition 1 was not compared with a known answer here ("" = it was, or n/a)

    def record(self, diff: Difference) -> None:
        if diff.repetition not in self.differing:
            self.differing.append(diff.repetition)
        if self.first is None:
            self.first = diff


class _Unknown(Exception):
    """The reference holds no exact value for part of an output."""


def _is_numpy(buf) -> bool:
    return not hasattr(buf, "numel")


def _length(buf) -> int:
    return int(buf.size) if _is_numpy(buf) else int(buf.numel())


def width_bits(buf) -> int:
    return 8 * (int(buf.itemsize) if _is_numpy(buf) else int(buf.element_size()))


def bits_view(buf):
    """The elements of ``buf`` as integers of the same width (the same memory, not a copy)."""
    if _is_numpy(buf):
        import numpy as np

        return buf.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[buf.itemsize])
    import torch

    return buf.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[buf.element_size()])


def _equal(a, b) -> bool:
    if _is_numpy(a):
        import numpy as np

        return bool(np.array_equal(a, b))
    import torch

    return bool(torch.equal(a, b))


def _first_true(mask) -> int:
    if _is_numpy(mask):
        import numpy as np

        return int(np.flatnonzero(mask)[0])
    return int(mask.nonzero()[0, 0])


def _as_type_of(values, out):
    """Reference values cast to ``out``'s element type (on its device), checked for length."""
    if _is_numpy(out):
        import numpy as np

        cast = np.asarray(values).astype(out.dtype, copy=False)
    else:
        import torch

        cast = torch.as_tensor(values, device=out.device).to(out.dtype)
    if _length(cast) != _length(out):
        raise ValueError(f"the known answer holds {_length(cast)} values for {_length(out)} output elements")
    return cast


def compare(got, reference) -> tuple[int, int, int] | None:
    """(first differing element, XOR of its bits, number of differing elements) of ``got`` against
    ``reference``, or None when every bit is equal. ``reference``: an array of the same length and
    element type, or a callable (start, stop) -> the reference values of that chunk (any numeric
    type, cast to ``got``'s; None where no exact value is known: raises _Unknown)."""
    total, mask = _length(got), (1 << width_bits(got)) - 1
    if not callable(reference) and _length(reference) != total:
        raise ValueError(f"reference holds {_length(reference)} elements, the output {total}")
    a, b = bits_view(got), None if callable(reference) else bits_view(reference)
    first, count = None, 0
    for start in range(0, total, CHUNK):
        stop = min(total, start + CHUNK)
        if callable(reference):
            chunk = reference(start, stop)
            if chunk is None:
                raise _Unknown()
            cb = bits_view(_as_type_of(chunk, got[start:stop]))
        else:
            cb = b[start:stop]
        ca = a[start:stop]
        if _equal(ca, cb):
            continue
        differs = ca != cb
        if first is None:
            i = _first_true(differs)
            first = (start + i, (int(ca[i]) ^ int(cb[i])) & mask)
        count += int(differs.sum())
    return None if first is None else (first[0], first[1], count)


def _copy(buf):
    return buf.copy() if _is_numpy(buf) else buf.clone()


def injected(rank: int, env=None) -> tuple[int, int, int] | None:
    """(repetition, element, bit) that INJECT_VAR flips on this rank, or None."""
    spec = (os.environ if env is None else env).get(INJECT_VAR, "").strip()
    if not spec:
        return None
    try:
        r, rep, element, bit = (int(p) for p in spec.split(":"))
    except ValueError:
        raise ValueError(f"{INJECT_VAR}={spec!r}: expected RANK:REPETITION:ELEMENT:BIT (whole numbers)") from None
    return (rep, element, bit) if r == rank else None


def flip_bit(buf, element: int, bit: int) -> None:
    """Flip one bit of one element of ``buf`` in place."""
    width = width_bits(buf)
    if not 0 <= bit < width or not 0 <= element < _length(buf):
        raise ValueError(f"{INJECT_VAR}: element {element} bit {bit} is outside a {_length(buf)}-element "
                         f"{width}-bit output")
    view = bits_view(buf)
    new = (int(view[element]) ^ (1 << bit)) & ((1 << width) - 1)
    if not _is_numpy(buf) and new >= 1 << (width - 1) and width > 8:   # torch's views are signed
        new -= 1 << width
    view[element] = new


def _together(fn, repetition: int, allgather) -> None:
    """Run fn on every rank; when any rank raised, every rank raises BitwiseError naming it."""
    mine = None
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - becomes the Case's failed row on every rank
        traceback.print_exc()
        mine = f"{type(exc).__name__}: {exc}"
    for rank, err in enumerate(allgather(mine)):
        if err:
            raise BitwiseError(f"bitwise check, repetition {repetition}: rank {rank}: {err}")


def _against_known(hooks, outs: list, result: RankResult) -> None:
    """Repetition 1 against the exact known answer (hooks.expected), where there is one."""
    if hooks.expected is None:
        result.unknown = hooks.no_expected
        return
    for index, out in enumerate(outs):
        try:
            hit = compare(out, lambda start, stop, i=index: hooks.expected(i, start, stop))
        except _Unknown:
            result.unknown = hooks.no_expected or "no exact known answer for every element"
            continue
        if hit:
            result.record(Difference(1, index, hit[0], hit[1], width_bits(out), hit[2], KNOWN))


def local_pass(hooks, repeats: int, rank: int, allgather) -> RankResult:
    """This rank's bitwise pass: ``repeats`` repetitions of the op (every rank together)."""
    result = RankResult(rank)
    if not all(allgather(hooks is not None)):
        result.checked = False
        return result
    flip: list = []
    _together(lambda: flip.append(injected(rank)), 0, allgather)
    reference: list = []

    def step(k: int) -> None:
        hooks.repeat()
        outs = list(hooks.outputs())
        result.outputs = len(outs)
        if flip[0] is not None and flip[0][0] == k:
            flip_bit(outs[0], flip[0][1], flip[0][2])
        if k == 1:
            _against_known(hooks, outs, result)
            reference.extend(_copy(o) for o in outs)
            return
        for index, (out, ref) in enumerate(zip(outs, reference)):
            hit = compare(out, ref)
            if hit:
                result.record(Difference(k, index, hit[0], hit[1], width_bits(out), hit[2], FIRST))

    for k in range(1, repeats + 1):
        _together(lambda k=k: step(k), k, allgather)
    reference.clear()
    return result


def row_columns(repeats: int, results: list[RankResult], family: str) -> dict:
    """Rank 0: the row's bitwise columns from every rank's result."""
    cols = {"bitwise_repeats": repeats, "bitwise_mismatch": None, "bitwise_first": "", "bitwise_note": ""}
    if not all(r.checked for r in results):
        cols["bitwise_note"] = (f"not checked bit for bit: the {family} family offers no output view "
                                f"(CaseState.bitwise)")
        return cols
    cols["bitwise_mismatch"] = len({k for r in results for k in r.differing})
    firsts = [r for r in results if r.first is not None]
    if firsts:
        r = min(firsts, key=lambda r: (r.first.repetition, r.first.against != KNOWN, r.rank))
        cols["bitwise_first"] = r.first.text(r.rank, r.outputs)
    unknown: dict[str, list[int]] = {}
    for r in results:
        if r.unknown:
            unknown.setdefault(r.unknown, []).append(r.rank)
    cols["bitwise_note"] = "; ".join(f"rank {', '.join(map(str, ranks))}: {why}: repetitions compared with "
                                     f"each other only" for why, ranks in unknown.items())
    return cols


def settle(row: dict, repeats: int, results: list[RankResult], family: str) -> None:
    """Rank 0: the bitwise columns into ``row``; an ok row whose repetitions differ becomes wrong."""
    row.update(row_columns(repeats, results, family))
    n = row["bitwise_mismatch"]
    if n and row.get("status") == "ok":
        row.update(status="wrong", reason=f"bitwise: {n} of {repeats} repetition(s) differ; first: "
                                          f"{row['bitwise_first']}")
