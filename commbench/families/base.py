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
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Param:
    """A family-specific suite parameter: default, accepted Python type(s), help text."""

    default: Any
    types: tuple[type, ...]
    help: str
    choices: tuple[Any, ...] | None = None


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


@dataclass
class RankContext:
    """What a rank knows while running a launch: its World, device, and a per-launch cache.

    ``cache`` lives for the whole launch (communicators, NVSHMEM handles,
    compiled libraries); register cleanups with ``on_close``; they run in
    reverse order when the launch ends, also after an error.
    """

    world: Any  # commbench.world.World
    device: str  # "cuda:N" or "cpu"
    cache: dict = field(default_factory=dict)
    closers: list[Callable[[], None]] = field(default_factory=list)
    launch_env: dict = field(default_factory=dict)

    def on_close(self, fn: Callable[[], None]) -> None:
        self.closers.append(fn)


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

    # --- planning (runs on the CPU, in the parent, no GPU packages) ---
    def unsupported(self, case: Case) -> str | None:
        """Reason a Case can never run (row becomes skipped), or None."""
        return None

    def validate_bench(self, bench: dict) -> list[tuple[str, str]]:
        """Extra checks on a suite benchmark: list of (field, message). Default none."""
        return []

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

    def teardown(self, state: Any) -> None:
        pass
