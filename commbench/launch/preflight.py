"""The preflight: the node a suite needs, held against the machine before the first launch
(docs/accept.md, "Preflight"; docs/suites.md, "The node a suite needs").

The need (:class:`NodeShape`) comes from the suite: what its ``node:`` states (GPUs, GPU model,
free memory per GPU), ``share_gpu``, and what its launches ask (the most ranks on one node among
the launches whose Cases need a GPU: not gloo or MPI). The machine is what ``sysinfo.nvml_devices``
reads (NVML). :func:`preflight` is a pure function of the two, tested with a stand-in machine:

- a launch with more ranks on the node than the node has GPUs never shares them silently: with
  ``share_gpu`` (the suite key or `--share-gpu`) the ranks share, and a note says so; otherwise
  `accept` stops at once, exit 1 ("node has 1 GPU, the suite expects 8": a GPU fallen off the bus
  is what acceptance exists to catch), and `run` records the launch's Cases as skipped with the
  reason;
- a suite whose launches need a GPU, on a machine without one: exit 2, saying so (a `run` of a
  suite that also has CPU launches runs those and skips the rest);
- a GPU model the suite names (its floors belong to that card) that the GPUs do not carry: `accept`
  exits 2 (the suite is not the one for this card), `run` notes it;
- less free memory on a GPU than ``node.gpu_memory``: `accept` exits 1, `run` skips the GPU Cases;
- a suite whose launches need no GPU (quickstart) passes on any machine.

Launches placed on named hosts (``placement: per_node | pairs | search``) run elsewhere: the local
node is not theirs, so they are not held against it (a note says so)."""
from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field

from ..errors import CommbenchError
from ..sysinfo.nvml_devices import GpusSeen

GIB = 1024**3
# Backends that run without a GPU (host memory, or torch tensors on the CPU when no GPU is there):
# never held against the node's GPUs, whatever their family prefers where a GPU exists
CPU_BACKENDS = ("gloo", "mpi")
CPU_SUITES = "suites/quickstart.yaml or suites/acceptance-cpu.yaml"


@dataclass(frozen=True)
class LaunchNeed:
    """One launch with Cases that need a GPU: its ranks on one node, those Cases and their
    benchmarks, and whether it runs on named hosts (not this node)."""

    launch_id: int
    ranks_per_node: int
    case_ids: tuple[str, ...]
    benches: tuple[str, ...]
    placed: bool = False


@dataclass(frozen=True)
class NodeShape:
    """What a suite needs of the node it starts on, and how strictly (``accept``)."""

    suite: str
    gpu_launches: tuple[LaunchNeed, ...] = ()
    cpu_cases: int = 0   # Cases that need no GPU (gloo, MPI, the harness)
    gpus: int | None = None            # node.gpus, as stated
    gpu_model: str | None = None       # node.gpu_model
    gpu_memory_bytes: int | None = None   # node.gpu_memory: free on each GPU
    share_gpu: bool = False
    accept: bool = False

    @property
    def local_launches(self) -> tuple[LaunchNeed, ...]:
        return tuple(n for n in self.gpu_launches if not n.placed)

    @property
    def gpus_per_node(self) -> int:
        """The GPUs one node must have: the stated count or the most ranks of a local GPU launch."""
        asked = max((n.ranks_per_node for n in self.local_launches), default=0)
        return max(asked, self.gpus or 0)


@dataclass(frozen=True)
class PreflightCheck:
    """One thing held against the machine (a JUnit testcase of `accept`)."""

    name: str
    passed: bool
    measured: str
    expected: str
    reason: str


@dataclass
class Preflight:
    """The answer: ``exit_status`` 0 (go on), 1 (the node fails the suite's shape: `accept` stops,
    the verdict in its JUnit file) or 2 (the suite cannot run here). ``verdicts``: why it stopped;
    ``notes``: said, and the run goes on; ``skipped``: Case id -> reason, Cases `run` records as
    skipped before launching; ``checks``: every check, passed or not."""

    exit_status: int = 0
    verdicts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checks: list[PreflightCheck] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    machine: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def message(self) -> str:
        """One paragraph: the verdicts (or the notes when it goes on) and the machine seen."""
        said = self.verdicts if self.verdicts else self.notes
        return "preflight: " + "; ".join(said) + (f" (seen: {self.machine})" if self.machine else "")

    def to_json(self) -> dict:
        """For run.json: what was checked and what it found."""
        return {"exit_status": self.exit_status, "verdicts": list(self.verdicts), "notes": list(self.notes),
                "checks": [asdict(c) for c in self.checks], "skipped_cases": len(self.skipped),
                "machine": self.machine}


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _gib(num_bytes: int) -> str:
    return f"{num_bytes / GIB:.1f} GiB"


def describe_machine(machine: GpusSeen) -> str:
    if not machine.gpus:
        return f"no GPU ({machine.problem})" if machine.problem else f"no GPU ({machine.source})"
    names = sorted({g.name for g in machine.gpus})
    return f"{_gpus(machine.count)}: {', '.join(names)} (read through {machine.source})"


def preflight(shape: NodeShape, machine: GpusSeen) -> Preflight:
    """Hold ``shape`` against ``machine`` (pure: no NVML, no process started)."""
    out = Preflight(machine=describe_machine(machine))
    local = shape.local_launches
    placed = len(shape.gpu_launches) - len(local)
    if placed:
        out.notes.append(f"{placed} launch(es) placed on named hosts are not checked from this node")
    if not local:
        if not shape.gpu_launches:
            out.notes.append("no launch needs a GPU")
        return out
    if machine.count == 0:
        _no_gpu(shape, machine, out)
        return out
    _check_count(shape, machine.count, out)
    _check_model(shape, machine, out)
    _check_memory(shape, machine, out)
    return out


def _benches(launches) -> str:
    names = list(dict.fromkeys(b for n in launches for b in n.benches))
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def _no_gpu(shape: NodeShape, machine: GpusSeen, out: Preflight) -> None:
    local = shape.local_launches
    why = machine.problem or f"{machine.source} lists none, or CUDA_VISIBLE_DEVICES hides them"
    out.checks.append(PreflightCheck("gpus", False, "0", str(shape.gpus_per_node),
                                     f"no GPU is visible here ({why})"))
    if shape.accept or not shape.cpu_cases:
        out.exit_status = 2
        out.verdicts.append(f"suite {shape.suite} needs a GPU (benchmarks {_benches(local)}) and none is "
                            f"visible here ({why}); on a machine without a GPU run a CPU suite "
                            f"({CPU_SUITES}) or `commbench nccl OP --backend mpi`")
        return
    reason = "needs a GPU; none is visible on this node"
    for need in local:
        out.skipped.update(dict.fromkeys(need.case_ids, reason))
    out.notes.append(f"no GPU here: the GPU Cases of {_benches(local)} are skipped; the CPU Cases run")


def _check_count(shape: NodeShape, count: int, out: Preflight) -> None:
    expected = shape.gpus_per_node
    short = [n for n in shape.local_launches if n.ranks_per_node > count]
    stated_short = shape.gpus is not None and shape.gpus > count
    sentence = f"node has {_gpus(count)}, the suite expects {expected}"
    if not short and not stated_short:
        out.checks.append(PreflightCheck("gpus", True, str(count), f">= {expected}", f"node has {_gpus(count)}"))
        return
    if shape.share_gpu:
        most = max((n.ranks_per_node for n in short), default=0)
        out.checks.append(PreflightCheck("gpus", True, str(count), f">= {expected} (share_gpu)", sentence))
        if most:
            out.notes.append(f"up to {most} ranks share {_gpus(count)} (share_gpu): a correctness rehearsal, "
                             f"not speed (docs/rehearsal.md)")
        elif stated_short:
            out.notes.append(sentence)
        return
    out.checks.append(PreflightCheck("gpus", False, str(count), f">= {expected}", sentence))
    if shape.accept:
        out.exit_status = max(out.exit_status, 1)
        out.verdicts.append(sentence)
        return
    for need in short:
        reason = (f"needs {_gpus(need.ranks_per_node)} on one node, this node has {count} (share_gpu: true or "
                  f"--share-gpu lets ranks share a GPU, for correctness only; or --set ranks={count})")
        out.skipped.update({cid: reason for cid in need.case_ids if cid not in out.skipped})
    out.notes.append(sentence + (f": the Cases of {_benches(short)} are skipped" if short else ""))


def _check_model(shape: NodeShape, machine: GpusSeen, out: Preflight) -> None:
    model = shape.gpu_model
    if not model:
        return
    others = sorted({g.name for g in machine.gpus if model.lower() not in g.name.lower()})
    if not others:
        out.checks.append(PreflightCheck("gpu model", True, machine.gpus[0].name, model, f"every GPU is a {model}"))
        return
    sentence = (f"the suite is for {model} GPUs (its floors are that card's) and this node has "
                f"{', '.join(others)}")
    out.checks.append(PreflightCheck("gpu model", False, ", ".join(others), model, sentence))
    if shape.accept:
        out.exit_status = 2
        out.verdicts.append(sentence + ": use the acceptance suite for this card")
    else:
        out.notes.append(sentence)


def _check_memory(shape: NodeShape, machine: GpusSeen, out: Preflight) -> None:
    need = shape.gpu_memory_bytes
    if not need:
        return
    short = []
    for g in machine.gpus:
        have, what = (g.free_bytes, "free") if g.free_bytes is not None else (g.total_bytes, "in all")
        if have is not None and have < need:
            short.append(f"GPU {g.index} ({g.name}) has {_gib(have)} {what}")
    unknown = [g.index for g in machine.gpus if g.free_bytes is None and g.total_bytes is None]
    if unknown:
        out.notes.append(f"the memory of GPU(s) {', '.join(map(str, unknown))} could not be read")
    if not short:
        out.checks.append(PreflightCheck("gpu memory", True, "enough", f">= {_gib(need)} free",
                                         f"every GPU has {_gib(need)} free"))
        return
    sentence = f"{'; '.join(short)}, the suite needs {_gib(need)} free on each GPU"
    out.checks.append(PreflightCheck("gpu memory", False, "; ".join(short), f">= {_gib(need)} free", sentence))
    if shape.accept:
        out.exit_status = max(out.exit_status, 1)
        out.verdicts.append(sentence)
        return
    for launch in shape.local_launches:
        out.skipped.update({cid: sentence for cid in launch.case_ids if cid not in out.skipped})
    out.notes.append(sentence + ": the GPU Cases are skipped")


def shape_of(suite, *, accept: bool, share_gpu: bool) -> NodeShape:
    """The NodeShape of a loaded suite (``suite.Suite``): its launches, ``node:`` and
    ``share_gpu`` (or the `--share-gpu` flag, ``share_gpu``)."""
    from ..families import get_family

    by_id = {c.case_id: c for c in suite.cases}
    gpu, cpu = [], 0
    for launch in suite.launches:
        every = [by_id[cid] for cid in launch.case_ids if cid in by_id]
        cases = [c for c in every if c.backend not in CPU_BACKENDS and get_family(c.family).needs_gpu_for(c)]
        cpu += len(every) - len(cases)
        if not cases:
            continue
        gpu.append(LaunchNeed(launch_id=launch.launch_id, ranks_per_node=launch.ranks_per_node,
                              case_ids=tuple(c.case_id for c in cases),
                              benches=tuple(dict.fromkeys(c.bench for c in cases)),
                              placed=bool(launch.hosts or launch.search)))
    node = suite.node
    return NodeShape(suite=suite.name, gpu_launches=tuple(gpu), cpu_cases=cpu, gpus=node.gpus,
                     gpu_model=node.gpu_model, gpu_memory_bytes=node.gpu_memory_bytes,
                     share_gpu=bool(share_gpu or suite.share_gpu), accept=accept)


def check_preflight(suite, *, accept: bool, share_gpu: bool, machine: GpusSeen | None = None) -> Preflight:
    """The preflight of a loaded suite on this machine (NVML read here unless ``machine`` is given).
    Call it after the suite loads and before the run folder or any launch: exit_status 2 is bad
    input (raise CommbenchError with ``message()``), 1 is an `accept` verdict (write the JUnit
    file with ``checks``, exit 1), 0 goes on (print ``notes``; `run` records ``skipped`` Cases as
    skipped rows with their reasons)."""
    if machine is None:
        from ..sysinfo.nvml_devices import read_gpus

        shape = shape_of(suite, accept=accept, share_gpu=share_gpu)
        if not shape.gpu_launches:
            return preflight(shape, GpusSeen((), "not read: no launch needs a GPU"))
        machine = read_gpus()
        return preflight(shape, machine)
    return preflight(shape_of(suite, accept=accept, share_gpu=share_gpu), machine)


class PreflightFailed(CommbenchError):
    """The node fails the suite's shape (`accept`): exit 1, nothing launched; ``preflight`` holds
    the checks for the JUnit file."""

    exit_code = 1

    def __init__(self, pre: Preflight):
        super().__init__(pre.message())
        self.preflight = pre


def enforce(pre: Preflight) -> None:
    """Stop as the preflight says: 2 is bad input (CommbenchError), 1 a failed node (PreflightFailed);
    otherwise say its notes on stderr and go on."""
    if pre.exit_status == 2:
        raise CommbenchError(pre.message())
    if pre.exit_status == 1:
        raise PreflightFailed(pre)
    for note in pre.notes:
        if note != "no launch needs a GPU":
            print(f"commbench: preflight: {note}", file=sys.stderr, flush=True)


def record_preflight(folder, suite, pre: Preflight, done: set[str]) -> set[str]:
    """The Cases the preflight settles (``pre.skipped``) as skipped rows with their reasons, before
    any launch; the ids recorded."""
    from .prepare import settled_row

    by_id = {c.case_id: c for c in suite.cases}
    recorded = set()
    for case_id, reason in pre.skipped.items():
        case = by_id.get(case_id)
        if case is None or case_id in done:
            continue
        folder.append_row(settled_row(case, "skipped", reason, "", case.ranks))
        recorded.add(case_id)
    return recorded
