"""The family interface (DESIGN section 4): what every benchmark family implements.

A family is one module in ``commbench/families/`` that defines ``FAMILY``, an
instance of a :class:`Family` subclass. The runner owns timing; a family only
sets up, enqueues one operation, checks, and says how many bytes moved.
Family modules must not import GPU-only packages (torch.cuda use, cupy,
nvshmem) at import time: ``validate`` and ``list`` run without them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ..comm.context import RankContext
from ..measure.memory import MemoryPlan


@dataclass(frozen=True)
class Param:
    """A family-specific suite parameter: default, accepted Python type(s), help text, and what
    values can ever run: ``choices``, an inclusive ``range`` (lo, hi; None = open) and ``check``
    (a further rule on one value, returning what is wrong or None). `validate` rejects any other
    value with file:line:field; `list` and the docs show the same table.

    A numeric Param must declare ``choices`` or a ``range`` closed on both sides, or say in
    ``why_unbounded`` why a side stays open: a definition without one (or whose default it
    refuses) raises ValueError when its module is imported. ``file_suffixes``: a string value
    ending in one of them names a file, and a relative one is taken from the suite file's folder
    (made absolute when the suite is loaded)."""

    default: Any
    types: tuple[type, ...]
    help: str
    choices: tuple[Any, ...] | None = None
    range: tuple[float | None, float | None] | None = None
    check: Callable[[Any], str | None] | None = None
    why_unbounded: str = ""
    file_suffixes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        wrong = self._definition_problem()
        if wrong:
            raise ValueError(f"Param({self.default!r}, help {self.help!r}): {wrong}")

    @property
    def numeric(self) -> bool:
        return any(t in (int, float) for t in self.types)

    def _definition_problem(self) -> str | None:
        lo, hi = self.range or (None, None)
        if lo is not None and hi is not None and lo > hi:
            return f"range {self.range} is empty"
        bounded = self.choices is not None or (lo is not None and hi is not None)
        if self.numeric and not bounded and not self.why_unbounded:
            return ("a numeric parameter needs choices, range=(lo, hi), or why_unbounded saying "
                    "why a side stays open")
        wrong = self.problem("default", self.default)
        return f"its own default is refused: {wrong}" if wrong else None

    def problem(self, name: str, value: Any) -> str | None:
        """What is wrong with one value of this parameter, or None."""
        if (isinstance(value, bool) and bool not in self.types) or not isinstance(value, self.types):
            return f"expected {'/'.join(t.__name__ for t in self.types)}, got {value!r}"
        if self.choices is not None and value not in self.choices:
            return f"{value!r} not in {list(self.choices)}"
        if self.range is not None:
            lo, hi = self.range
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                return f"{name} must be {self.range_text()}, got {value!r}"
        if self.check is not None:
            msg = self.check(value)
            if msg:
                return f"{name} {msg}, got {value!r}"
        return None

    def range_text(self) -> str:
        lo, hi = self.range or (None, None)
        if lo is not None and hi is not None:
            return f"{lo}..{hi}"
        if lo is None and hi is None:
            return "any value"
        return f">= {lo}" if lo is not None else f"<= {hi}"

    def values_text(self) -> str:
        """What values run, as `list` and the docs say it ("" for a plain bool or string)."""
        parts = []
        if self.choices is not None:
            parts.append(f"one of {', '.join(map(str, self.choices))}")
        if self.range is not None or (self.numeric and self.choices is None):
            parts.append(f"range {self.range_text()}")
        if self.why_unbounded:
            parts.append(f"unbounded: {self.why_unbounded}")
        return "; ".join(parts)


def multiple_of(step: int) -> Callable[[Any], str | None]:
    """A Param check: the value is a multiple of ``step``."""
    return lambda v: None if v % step == 0 else f"must be a multiple of {step}"


def power_of_two(v: Any) -> str | None:
    """A Param check: the value is a power of two."""
    return None if v > 0 and v & (v - 1) == 0 else "must be a power of two"


@dataclass(frozen=True)
class Case:
    """One measured point. Frozen and hashable; ``case_id`` is stable across runs."""

    suite: str
    bench: str
    family: str
    op: str
    backend: str
    variant: str
    env: tuple[tuple[str, str], ...]
    dtype: str
    size_bytes: int
    params: tuple[tuple[str, Any], ...]
    warmup: int
    iters: int
    timing: str
    ranks: int
    ranks_per_node: int
    timeout_s: float
    hosts: tuple[str, ...] = ()  # named hosts of a per-node / pairwise placement; () = anywhere
    # "torch" | "nccl" | "" (commbench.profile): how the timed batch is profiled; not part of
    # case_id, a profiled point is the same point (its row says `profiled`)
    profile: str = ""
    # `check: bitwise` (measure/bitwise.py): after the values check, the op runs this many more
    # times on identical inputs and every rank's output is compared bit for bit; 0 = no such
    # check. Not part of case_id either: the same point, checked more closely
    bitwise_repeats: int = 0

    def param(self, name: str, default: Any = None) -> Any:
        return dict(self.params).get(name, default)

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def case_id(self) -> str:
        fields = [self.bench, self.family, self.op, self.backend, self.variant, self.env,
                  self.dtype, self.size_bytes, self.params, self.timing, self.ranks]
        if self.hosts:
            fields.append(list(self.hosts))
        key = json.dumps(fields, sort_keys=True, default=str)
        return hashlib.sha1(key.encode()).hexdigest()[:12]

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["env"] = [list(kv) for kv in self.env]
        d["params"] = [list(kv) for kv in self.params]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Case":
        d = dict(d)
        d["env"] = tuple(tuple(kv) for kv in d["env"])
        d["params"] = tuple((k, _freeze(v)) for k, v in d["params"])
        d["hosts"] = tuple(d.get("hosts", ()))
        return cls(**d)


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v


@dataclass(frozen=True)
class Traffic:
    """Bytes for the bandwidth formulas: algbw = algbw_bytes / time, busbw = algbw * bus_factor."""

    algbw_bytes: float
    bus_factor: float


class Family:
    """Base class. Subclasses set the class attributes and implement the methods.

    ``setup`` returns a :class:`commbench.measure.state.CaseState` (a family subclasses it with
    its own fields): the runner reads only the fields CaseState declares (stream, native, measure,
    extra, size_bytes, count, ...), so what a family promises the runner is written in one place.
    """

    name: str = ""
    summary: str = ""
    ops: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ("float32",)
    default_dtype: str = "float32"
    needs_gpu: bool = True
    needs_torch: bool = True   # False: runs without torch installed (`pip install commbench[mpi]`)
    # family-specific suite parameters (name -> Param); lists in a suite expand to cross products
    params: dict[str, Param] = {}

    def needs_gpu_for(self, case: Case) -> bool:
        """Whether this Case's ranks must be bound to GPUs (default: the family's needs_gpu)."""
        return self.needs_gpu

    # --- planning (runs on the CPU, in the parent, no GPU packages) ---
    # Three kinds of "this Case cannot run", kept apart so that `validate` can reject what the
    # suite alone decides: a parameter value outside its Param (checked from the table), a
    # combination the sweep produced that can never run (``impossible``), and what depends on
    # the machine or the site (``machine_reason``). ``unsupported`` is their union; families
    # override the two hooks, not it.
    def unsupported(self, case: Case) -> str | None:
        """Reason a Case can never run here (row becomes skipped), or None."""
        for name, spec in self.params.items():
            reason = spec.problem(name, case.param(name, spec.default))
            if reason:
                return reason
        conflict = self.impossible(case)
        return conflict[1] if conflict else self.machine_reason(case)

    def impossible(self, case: Case) -> tuple[str, str] | None:
        """A combination of suite values that can never run: (suite field to blame, reason).

        The field is a suite key ("sizes", "ranks", "dtypes", "ops", "backends", "timing",
        "ranks_per_node") or "params.NAME". `validate` rejects a value of that field when no
        Case with it can run; otherwise such Cases become skipped rows."""
        return None

    def machine_reason(self, case: Case) -> str | None:
        """Reason a Case cannot run that depends on the machine or the site (kill switches);
        GPU count, SM count and transport are found in ``setup`` (raise SkipCase there)."""
        return None

    def bench_problems(self, bench: dict) -> list[tuple[str, str]]:
        """Every problem of a suite benchmark (merged with defaults): list of (field, message).
        Each value of each parameter is checked against its Param (for every family: an
        override of ``validate_bench`` cannot drop it), then the family's own checks."""
        problems = []
        params = bench.get("params") or {}
        for name, value in (params.items() if isinstance(params, dict) else ()):
            spec = self.params.get(name)
            if spec is None:
                continue   # unknown names are the suite loader's error
            for v in value if isinstance(value, list) else [value]:
                msg = spec.problem(name, v)
                if msg:
                    problems.append((f"params.{name}", msg))
        return problems + list(self.validate_bench(bench))

    def validate_bench(self, bench: dict) -> list[tuple[str, str]]:
        """The family's own checks on a suite benchmark beyond each Param's (which
        ``bench_problems`` applies first): list of (field, message). Default: none."""
        return []

    def launch_env(self, case: Case, env: Mapping[str, str], log_dir: Path) -> dict[str, str]:
        """Variables this Case's ranks need from process start (NCCL and NVSHMEM read theirs once,
        at initialisation): the launch adds them to its environment (suite.launches.declared_env),
        because no family may write ``os.environ``. ``env`` is the environment the ranks would
        start with otherwise (the parent's, the Case's variant over it), ``log_dir`` the run's
        logs folder. Default: nothing."""
        return {}

    def finalize_case(self, case: Case, explicit: frozenset) -> Case:
        """The Case as it will run, given the parameter names the suite wrote itself
        (a family with presets fills the others from them). Default: unchanged."""
        return case

    # --- measuring (runs in every rank) ---
    def setup(self, case: Case, ctx: RankContext) -> Any:
        raise NotImplementedError

    def run(self, state: Any) -> None:
        """Enqueue exactly one operation. No timing, no host synchronisation."""
        raise NotImplementedError

    def check(self, state: Any) -> int:
        """Untimed correctness pass after timing: number of wrong elements on this rank."""
        raise NotImplementedError

    def traffic(self, case: Case, world_size: int) -> Traffic:
        raise NotImplementedError

    def memory_bytes(self, case: Case, world_size: int) -> MemoryPlan | None:
        """The device memory one rank of this Case allocates (weights, buffers, workspaces,
        symmetric and NVSHMEM heaps, what the check builds), by named part: a
        ``commbench.measure.memory.MemoryPlan``. The runner calls it before set-up, on the CPU
        side of the rank (no allocation), and skips a Case whose plan does not fit the GPU's free
        memory (divided among the ranks that share the GPU). None: no plan, the Case is not
        checked (the default)."""
        return None

    def teardown(self, state: Any) -> None:
        pass
