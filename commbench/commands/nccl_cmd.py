"""`commbench nccl OP`: one collective swept over sizes, typed as for nccl-tests; the options make a
suite (analysis/quick.py), which runs as any other Run, and nccl-tests' table is printed."""
from __future__ import annotations

from pathlib import Path

import click

from ..analysis.nccl_tests_options import OPTIONS
from ..errors import CommbenchError
from .nccl_errors import in_flag_terms


def _nccl_tests_option(name: str, dest: str, **kw):
    """An option spelt as nccl-tests spells it (analysis/nccl_tests_options.py)."""
    return click.option(f"-{OPTIONS[name].short}", f"--{OPTIONS[name].long}", dest, **kw)


@click.command("nccl", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("op")
@_nccl_tests_option("min_bytes", "min_bytes", default="8", show_default=True, metavar="SIZE",
              help="smallest size (8, 1K, 4M, 1G: binary units, as nccl-tests)")
@_nccl_tests_option("max_bytes", "max_bytes", default="128M", show_default=True, metavar="SIZE",
              help="largest size")
@_nccl_tests_option("step_factor", "step_factor", type=float, default=2.0, show_default=True,
              help="multiply the size by this between steps (1: use -i)")
@_nccl_tests_option("step_bytes", "step_bytes", default=None, metavar="SIZE",
              help="add this to the size between steps (with -f 1; default 1M)")
@_nccl_tests_option("iters", "iters", type=click.IntRange(1, 100000), default=20, show_default=True,
              help="timed iterations")
@_nccl_tests_option("warmup", "warmup", type=click.IntRange(0, 100000), default=5, show_default=True,
              help="untimed warm-up iterations")
@_nccl_tests_option("ngpus", "ranks", type=click.IntRange(min=1), default=None,
              help="ranks, one per GPU (default: every GPU of this host; 2 on --backend gloo/mpi)")
@_nccl_tests_option("dtype", "dtype", default="float", show_default=True,
              help="float, half, bfloat16 (bf16), int32")
@_nccl_tests_option("redop", "redop", type=click.Choice(["sum", "max", "min"]), default="sum", show_default=True,
              help="reduction of all_reduce, reduce_scatter and reduce")
@_nccl_tests_option("check", "check", type=click.IntRange(0, 1), default=1, show_default=True,
              help="accepted for nccl-tests' command lines: commbench checks every Case anyway (untimed)")
@_nccl_tests_option("graph", "graph", type=click.IntRange(min=0), default=0, show_default=True,
              help="above 0: time with CUDA graphs (timing: graph)")
@_nccl_tests_option("register", "register", type=click.IntRange(0, 2), default=0, show_default=True,
              help="nccl backend: 1 registers buffers with ncclCommRegister, 2 as symmetric windows")
@_nccl_tests_option("unalign", "unalign", type=click.IntRange(0, 1024), default=0, show_default=True,
              help="shift send and receive buffers by this many elements off their alignment")
@_nccl_tests_option("average", "average", type=click.IntRange(0, 3), default=3, show_default=True,
              help="ranks' times per iteration: 0 rank 0, 1 mean, 2 fastest, 3 slowest")
@click.option("--backend", type=click.Choice(["nccl", "torch_nccl", "gloo", "mpi"]), default="nccl",
              show_default=True, help="gloo or mpi run on CPU (no GPU needed)")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="run folder (default results/<UTC time>-quick-OP)")
@click.option("--quiet", is_flag=True, help="no per-Case progress lines (the table is still printed)")
def nccl_cmd(op: str, quiet: bool, out: Path | None, **options):
    """One collective swept over sizes, typed as for nccl-tests; prints nccl-tests' table.

    OP: all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce, sendrecv, gather,
    scatter. Example: commbench nccl all_reduce -b 8 -e 8G -f 2 -g 8. The run folder is a normal
    one (report, compare and accept read it; its suite.yaml is the suite the options made)."""
    import tempfile

    from ..analysis.finish import finish
    from ..analysis.quick import QuickArgs, refuse_without_gpu, suite_dict, table_of, write_suite
    from .options import load
    from .start import execute, print_verdict, stopping_cleanly

    args = QuickArgs(op=op, **options)
    suite_dict(args)   # bad options: exit 2 before anything starts
    refuse_without_gpu(args)

    def show(folder, console):
        click.echo(table_of(folder.latest_rows(), args, folder.read_meta().get("links")))

    with tempfile.TemporaryDirectory(prefix="commbench-quick-") as tmp:
        suite_path = write_suite(args, Path(tmp))
        try:   # the suite is the options written down: its problems are told as the flags'
            suite = load(suite_path, {}, None, None)
            with stopping_cleanly(resume_hint=""):
                run_dir = execute(suite, out, quiet=quiet,
                                  finish=lambda folder, console: finish(folder, console, show=show))
        except CommbenchError as exc:
            raise in_flag_terms(exc, suite_path) from None
    raise SystemExit(print_verdict([run_dir], run_dir))
