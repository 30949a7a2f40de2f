"""Property-based hostile inputs (issue 21, item 2): random and mutated suites, `--set` values, rules
files and run-folder files fed to validate, accept, compare and report. Whatever the input, the
command exits with a status its contract allows and either succeeds or prints one bounded
`commbench: error:` message; never a traceback; each example within a deadline.

The `ci` profile (default) is derandomized and small enough for `make test`; run a wider search with
HYPOTHESIS_PROFILE=explore (random, many more examples)."""
from __future__ import annotations

import os
import resource
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is a test dependency (make venv)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from commbench.cli import cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "runs" / "cpu-base"
MAX_OUTPUT_CHARS = 20_000     # a message stays a paragraph; tables of a good run are larger than one

settings.register_profile("ci", max_examples=60, deadline=20_000, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("explore", max_examples=2000, deadline=20_000, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SUITE_TEMPLATES = [
    (ROOT / "suites" / "quickstart.yaml").read_text(),
    (ROOT / "suites" / "acceptance-cpu.yaml").read_text(),
    """name: s
defaults: {ranks: 2, sizes: {min: 8B, max: 1MiB, factor: 4}, warmup: 1, iters: 2}
benchmarks:
  - name: b
    family: collectives
    backends: [mpi, gloo]
    ops: [all_reduce, broadcast]
    dtypes: [float32]
    timing: [auto, host]
    env: {NCCL_ALGO: [Ring, Tree]}
    params: {in_place: [false, true]}
""",
]
RULES_TEMPLATES = [
    (ROOT / "suites" / "acceptance-cpu.yaml").read_text(),
    """rules:
  - {name: bw, select: {op: all_reduce, size_bytes: {min: 1KiB}}, metric: busbw_gbps, aggregate: min,
     op: '>=', value: 0}
  - {name: t, select: {backend: [mpi, gloo]}, metric: time_us, aggregate: median, op: '<=', value: 1e9, min_rows: 2}
localize: {min_excess_pct: 10}
require_all_ok: false
""",
]
# Fragments a hostile user types: YAML tags, anchors, merge keys, math text, NUL, huge numbers.
SNIPPETS = ["&a ", "*a", "<<: *a", "!!set {a}", "!!binary aGk=", "!!python/name:os.system", "? [a]\n: 1",
            ".nan", ".inf", "-.inf", "9" * 5000, "1e400", "$_$", "a$_$b", "\x00", "\ufeff", "[" * 80, "{a: " * 70,
            "'", '"', ": ", "- ", "\t", "\r\n", "---\n", "...\n", "%YAML 1.1\n", "#", "~", "null", "yes",
            "2026-12-01", "0x10", "0o7", "1_000", "LD_PRELOAD: /x", "PYTHONPATH: /x", "ranks: 100000",
            "sizes: {min: 1, max: 1GiB, step: 1}", "family: [collectives]", "x" * 3000]
HOSTILE_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(SNIPPETS),
    st.text(max_size=40), st.lists(st.integers(-3, 3), max_size=5),
    st.dictionaries(st.sampled_from(["min", "max", "step", "factor", "a", "env", "NCCL_ALGO"]),
                    st.one_of(st.integers(-5, 10**6), st.sampled_from(["1KiB", "$_$", ".nan"])), max_size=4),
)


@st.composite
def mutated_text(draw, templates: list[str]) -> bytes:
    """A template with a few textual and structural mutations, or random bytes."""
    kind = draw(st.sampled_from(["text", "text", "tree", "bytes", "encoding"]))
    base = draw(st.sampled_from(templates))
    if kind == "bytes":
        return draw(st.binary(max_size=400))
    if kind == "encoding":
        return base.encode(draw(st.sampled_from(["utf-16", "utf-32", "latin-1"])), errors="replace") + \
            draw(st.sampled_from([b"", b"\xe9", b"\xff\xfe", b"\x00"]))
    if kind == "tree":
        return _mutate_tree(draw, base).encode("utf-8", "surrogatepass")
    text = base
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "delete", "duplicate", "replace_char", "cut"]))
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 60)))
        if op == "insert":
            text = text[:i] + draw(st.sampled_from(SNIPPETS)) + text[i:]
        elif op == "delete":
            text = text[:i] + text[j:]
        elif op == "duplicate":
            text = text[:j] + text[i:j] * draw(st.integers(1, 3)) + text[j:]
        elif op == "replace_char" and text:
            k = min(i, len(text) - 1)
            text = text[:k] + draw(st.sampled_from(list("$_{}[]:&*!\n\x00-'\"#|>%@`"))) + text[k + 1:]
        else:
            text = text[:i]
    return text.encode("utf-8", "surrogatepass")


def _mutate_tree(draw, base: str) -> str:
    doc = yaml.safe_load(base)
    for _ in range(draw(st.integers(1, 3))):
        node, key = _pick(draw, doc)
        if node is None:
            break
        node[key] = draw(HOSTILE_VALUES)
    try:
        return yaml.safe_dump(doc, allow_unicode=True)
    except yaml.YAMLError:
        return base


def _pick(draw, doc):
    """A (container, key) somewhere in the document, found by a random walk from the top."""
    node, key = None, None
    current = doc
    for _ in range(draw(st.integers(1, 5))):
        if isinstance(current, dict) and current:
            k = draw(st.sampled_from(sorted(current, key=str)))
        elif isinstance(current, list) and current:
            k = draw(st.integers(0, len(current) - 1))
        else:
            break
        node, key, current = current, k, current[k]
    return node, key


def run_cli(args: list[str], codes: tuple[int, ...]) -> None:
    result = CliRunner().invoke(cli, args)
    exc = result.exception
    assert exc is None or isinstance(exc, SystemExit), f"{args[0]}: traceback: {exc!r}"
    assert result.exit_code in codes, (result.exit_code, result.output[-2000:])
    assert "Traceback" not in result.output and "this is a bug in commbench" not in result.output, result.output
    if result.exit_code == 2:
        assert "commbench: error: " in result.output, result.output[-2000:]
        assert len(result.output) < MAX_OUTPUT_CHARS, len(result.output)


@pytest.fixture(scope="module")
def workdir():
    d = Path(tempfile.mkdtemp(prefix="commbench-hyp-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def small_run(workdir):
    """A run folder with few points (fast plots): the first ok rows of the fixture and their samples."""
    run = workdir / "small"
    shutil.copytree(FIXTURE, run)
    df = pd.read_csv(FIXTURE / "results.csv", keep_default_na=False)
    keep = df.head(6)
    keep.to_csv(run / "results.csv", index=False)
    samples = pd.read_csv(FIXTURE / "samples.csv", keep_default_na=False)
    samples[samples["case_id"].isin(set(keep["case_id"]))].to_csv(run / "samples.csv", index=False)
    return run


@pytest.fixture(scope="module")
def memory_bound():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    yield
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 1024 * 1024, f"resident memory grew by {grown_kib // 1024} MiB"


@given(data=mutated_text(SUITE_TEMPLATES))
def test_validate_any_suite(workdir, memory_bound, data):
    path = workdir / "suite.yaml"
    path.write_bytes(data)
    run_cli(["validate", str(path), "--max-cases", "2000"], (0, 2))


@given(data=mutated_text([SUITE_TEMPLATES[2]]), item=st.sampled_from(
    ["sizes", "ranks", "ops", "env", "params.in_place", "timing", "iters", "placement"]),
    value=st.one_of(st.sampled_from(SNIPPETS), st.text(max_size=30)))
def test_validate_any_set(workdir, memory_bound, data, item, value):
    path = workdir / "suite-set.yaml"
    path.write_bytes(SUITE_TEMPLATES[2].encode())
    run_cli(["validate", str(path), "--max-cases", "2000", "--set", f"{item}={value}"], (0, 2))


@given(data=mutated_text(RULES_TEMPLATES))
def test_accept_any_rules(workdir, small_run, memory_bound, data):
    path = workdir / "rules.yaml"
    path.write_bytes(data)
    run_cli(["accept", str(small_run), "--rules", str(path), "--out", str(workdir / "accept.html"),
             "--baseline", str(small_run)], (0, 1, 2))


RUN_FILES = ["results.csv", "samples.csv", "run.json", "results.jsonl"]


@given(name=st.sampled_from(RUN_FILES), data=st.data())
def test_accept_and_compare_any_run_folder(workdir, small_run, memory_bound, name, data):
    run = _damaged_copy(workdir, small_run, name, data)
    rules = workdir / "ok-rules.yaml"
    rules.write_text(RULES_TEMPLATES[1])
    run_cli(["accept", str(run), "--rules", str(rules), "--out", str(workdir / "a.html")], (0, 1, 2))
    run_cli(["compare", str(small_run), str(run)], (0, 1, 2))


@settings(max_examples=12)
@given(name=st.sampled_from(RUN_FILES), data=st.data())
def test_report_any_run_folder(workdir, small_run, memory_bound, name, data):
    run = _damaged_copy(workdir, small_run, name, data)
    run_cli(["report", str(run), "--out", str(workdir / "r.html")], (0, 2))


def _damaged_copy(workdir: Path, small_run: Path, name: str, data) -> Path:
    run = workdir / "damaged"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(small_run, run)
    original = (run / name).read_text() if (run / name).exists() else ""
    if name.endswith(".csv") and data.draw(st.booleans()):
        mutated = _mutate_csv(data, original)
    else:
        mutated = data.draw(mutated_text([original or "{}\n"]))
    (run / name).write_bytes(mutated)
    return run


def _mutate_csv(data, text: str) -> bytes:
    """Cell-level damage: a hostile value in a random cell, a dropped column, a repeated row."""
    df = pd.read_csv(__import__("io").StringIO(text), keep_default_na=False, dtype=str)
    op = data.draw(st.sampled_from(["cell", "cell", "drop", "repeat", "label"]))
    if op == "cell" and len(df):
        r, c = data.draw(st.integers(0, len(df) - 1)), data.draw(st.sampled_from(list(df.columns)))
        df.loc[r, c] = str(data.draw(HOSTILE_VALUES))
    elif op == "drop":
        df = df.drop(columns=[data.draw(st.sampled_from(list(df.columns)))])
    elif op == "repeat" and len(df):
        df = pd.concat([df, df.iloc[[data.draw(st.integers(0, len(df) - 1))]]])
    elif op == "label" and "variant" in df.columns:
        df["variant"] = data.draw(st.sampled_from(["a$_$b", "$\\frac{", "x$^$y", "\x00"]))
    return df.to_csv(index=False).encode("utf-8", "surrogatepass")
