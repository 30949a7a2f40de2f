"""Options shared by the commands that load a suite: `--set`, `--only`, `--max-cases`,
`--max-ranks`, and the --dry-run pricing options. Nothing heavy is imported here (`--help` stays fast)."""
from __future__ import annotations

from pathlib import Path

import click


def suite_options(fn):
    """--set KEY=VALUE, --only BENCH, --max-cases N, --max-ranks N (docs/suites.md)."""
    fn = click.option("--max-ranks", type=click.IntRange(min=1), default=None, metavar="N",
                      help="allow launches of up to N ranks, beyond what the launcher can start "
                           "(default: the CPUs/GPUs of this host, the MPI job or the Slurm allocation)")(fn)
    # the default lives in suite/limits.py (not imported here: `--help` stays fast)
    fn = click.option("--max-cases", type=click.IntRange(min=1), default=None, metavar="N",
                      help="refuse a suite that expands to more than N Cases (default 20000)")(fn)
    fn = click.option("--only", "only", multiple=True, metavar="BENCH",
                      help="run only the named benchmark(s) of the suite (repeatable; recorded in run.json)")(fn)
    return click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                        help="override a key in every benchmark, e.g. --set ranks=2 --set sizes=[1MiB] "
                             "--set params.num_sms=16 (recorded in run.json)")(fn)


def price_options(fn):
    """--launch-cost / --estimate-from: what a --dry-run's schedule is priced with."""
    fn = click.option("--estimate-from", type=click.Path(path_type=Path, exists=True, file_okay=False),
                      default=None, metavar="RUN",
                      help="with --dry-run: price the schedule from a previous run folder (the median "
                           "launch wall time less its Cases, and each Case's time)")(fn)
    return click.option("--launch-cost", default=None, metavar="DURATION",
                        help="with --dry-run: the cost of one launch (e.g. 15s) for the projected wall time")(fn)


def overrides_of(sets: tuple[str, ...], only: tuple[str, ...], profile: str | None = None) -> dict:
    """The overrides `--set`, `--only` (and `run --profile`) make, as load_suite takes them."""
    from ..suite import ONLY_KEY, parse_overrides

    overrides = parse_overrides(sets)
    if only:
        overrides[ONLY_KEY] = list(only)
    if profile:
        overrides["profile"] = profile
    return overrides


def load(suite: Path, overrides: dict, max_cases: int | None, max_ranks: int | None):
    """The Suite, read once: every command works from this object afterwards."""
    from ..suite import load_suite
    from ..suite.limits import DEFAULT_MAX_CASES, SuiteLimits

    limits = SuiteLimits(max_cases=max_cases or DEFAULT_MAX_CASES, max_ranks=max_ranks)
    return load_suite(suite, overrides=overrides, limits=limits)


def share_gpu_option(fn):
    """--share-gpu: ranks may share a GPU (as the suite key share_gpu; docs/suites.md)."""
    return click.option("--share-gpu", "share_gpu", is_flag=True,
                        help="let ranks share a GPU when a launch has more ranks on the node than it has "
                             "GPUs (a correctness rehearsal, docs/rehearsal.md); without it such launches "
                             "are skipped (run) or fail the preflight (accept)")(fn)
