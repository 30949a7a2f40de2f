"""Click commands `report`, `compare`, `accept` (wired into the CLI group by commbench/cli.py).

pandas, matplotlib and scipy are imported inside the commands: `commbench --help`, `validate`
and `run`'s start do not pay for them."""
from __future__ import annotations

import math
import os
import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import click

from ..errors import CommbenchError


def _twin_paths(out: Path) -> tuple[Path, Path]:
    out = Path(out)
    html_path = out if out.suffix in (".html", ".htm") else out.with_suffix(".html")
    return html_path, html_path.with_suffix(".md")


def _write_both(doc, out: Path) -> tuple[Path, Path]:
    from .report.build import write_document

    html_path, md_path = _twin_paths(out)
    if not html_path.parent.is_dir():
        raise CommbenchError(f"output folder {html_path.parent} does not exist or is not a folder; create it or pick "
                             "another --out.")
    with _writing(html_path):
        return write_document(doc, html_path, md_path)   # temp + rename: no cut report on a full disk


@contextmanager
def _writing(path: Path, option: str = "--out"):
    """An output that cannot be written (read-only folder, a dangling link, a full disk) is a
    one-line error, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise CommbenchError(f"cannot write {path}: {exc.strerror or exc}; pick another {option}") from None


def _check_writable(path: Path, option: str) -> None:
    """Refuse an output path that cannot be written before a run spends its time (exit 2)."""
    path = Path(path)
    if path.is_dir():
        raise CommbenchError(f"cannot write {path}: it is a folder; pick another {option}")
    parent = path.parent
    if not parent.is_dir():
        raise CommbenchError(f"cannot write {path}: {parent} does not exist or is not a folder; "
                             f"pick another {option}")
    if not os.access(parent, os.W_OK):
        raise CommbenchError(f"cannot write {path}: {parent} is not writable; pick another {option}")


@click.command("report")
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="HTML file to write (a Markdown twin goes next to it). "
                   "Default: RUN/report.html for one run folder or one `run --repeat` set, "
                   "./report.html for several.")
def report_cmd(runs: tuple[Path, ...], out: Path | None) -> None:
    """Build a self-contained HTML report and a Markdown twin from one or more run folders."""
    from ..runfolder.reader import load_run
    from .report.build import build_report
    from .runsets import expand, one_folder

    folders = expand(runs)   # a folder of repeats counts as its runs
    loaded = [load_run(r) for r in folders]
    if out is None:   # a run folder or a repeat set holds its own report; never the current folder
        home = one_folder(runs) or (folders[0] if len(folders) == 1 else None)
        out = home / "report.html" if home is not None else Path("report.html")
    html_path, md_path = _write_both(build_report(loaded, _twin_paths(out)[0].parent), out)
    click.echo(f"wrote {html_path} and {md_path}")


@click.command("compare")
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--threshold", "threshold_pct", type=float, default=5.0, show_default=True,
              help="Smallest change of the time, in percent, that counts as better/worse "
                   "(the minimum effect size).")
@click.option("--alpha", type=float, default=0.05, show_default=True,
              help="Significance level, after the correction for comparing many points.")
@click.option("--correction", type=click.Choice(["holm", "bh", "none"]), default="holm", show_default=True,
              help="Correction for many points: Holm (family-wise), Benjamini-Hochberg (false "
                   "discovery rate) or none.")
@click.option("--fail-above", "fail_above_pct", type=float, default=None,
              help="Exit with status 1 when any point is worse (beyond its noise) by more than PCT "
                   "percent, or a point of BASE is missing, not ok or not comparable in NEW; the failing "
                   "points are listed. Points compare can't tell are listed and do not fail.")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="HTML file to write (a Markdown twin goes next to it). Default: print only.")
def compare_cmd(runs: tuple[Path, ...], threshold_pct: float, alpha: float, correction: str,
                fail_above_pct: float | None, out: Path | None) -> None:
    """Compare NEW against BASE point by point: `compare BASE NEW`, or several run folders per
    side, `compare B1 B2 vs N1 N2`. A folder written by `run --repeat N` counts as its N runs.
    Ratios are NEW/BASE; verdicts weigh each change against the point's noise."""
    from ..sysinfo.load import describe
    from .compare import CANT_TELL, CompareSettings, compare_runs, failing_points
    from .compare_summary import compare_document, point_lines, terminal_summary
    from .runsets import load_side, side_label, split_sides
    from .text_table import text_table

    if not (math.isfinite(threshold_pct) and threshold_pct >= 0) or not 0 < alpha < 1:
        raise CommbenchError(f"--threshold must be a finite number >= 0 and --alpha in (0, 1); got "
                             f"{threshold_pct}, {alpha}.")
    if fail_above_pct is not None and not (math.isfinite(fail_above_pct) and fail_above_pct >= 0):
        raise CommbenchError(f"--fail-above must be a finite percentage >= 0; got {fail_above_pct} (a NaN or "
                             "infinite gate would pass every point).")
    base_paths, new_paths = split_sides(runs)
    b, n = load_side(base_paths), load_side(new_paths)
    settings = CompareSettings(threshold_pct=threshold_pct, alpha=alpha, correction=correction)
    points = compare_runs(b, n, settings)
    warnings = [w for w in (describe(str(r.path), r.meta) for r in b + n) if w]
    click.echo(f"compare {side_label(b)} -> {side_label(n)}")
    click.echo("\n".join(terminal_summary(points, settings, fail_above_pct)))
    if not points.empty:
        shared = points[points["why"].astype(str).str.contains("shared one GPU", regex=False)]
        if len(shared):   # say why, not only "not comparable"
            click.echo(f"{len(shared)} point(s) not comparable: {shared['why'].iloc[0]}", err=True)
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    if out is not None:
        doc = compare_document(side_label(b), side_label(n), points, settings, warnings)
        html_path, md_path = _write_both(doc, out)
        click.echo(f"wrote {html_path} and {md_path}")
    if fail_above_pct is None:
        return
    bad = failing_points(points, fail_above_pct)
    verdicts = list(points["verdict"]) if len(points) else []
    comparable = sum(v in ("better", "worse", "unchanged", CANT_TELL) for v in verdicts)
    unsure = verdicts.count(CANT_TELL)
    if len(bad):
        click.echo(f"\nfailing points ({len(bad)}):")
        click.echo(text_table(point_lines(points, bad, why=True)))
        click.echo(f"FAIL: {len(bad)} point(s) worse beyond their noise by more than {fail_above_pct:g}%, or "
                   "missing or not comparable in NEW", err=True)
        sys.exit(1)
    if comparable == 0:
        click.echo("FAIL: nothing comparable: NEW measured none of BASE's points", err=True)
        sys.exit(1)
    click.echo(f"PASS: {comparable} point(s) compared, none worse by more than {fail_above_pct:g}%"
               + (f"; {unsure} point(s) {CANT_TELL} (listed above): they do not fail the gate, "
                  "and nothing says they are unchanged" if unsure else ""))


def _suite_has_rules(path: Path) -> bool:
    """A quick look for a 'rules' key (load_rules then reads the file properly and says what is
    wrong with it); any bytes, however unreadable, give an answer, never an exception."""
    try:
        if not path.is_file():
            return False
        if path.stat().st_size > 16 * 1024 * 1024:
            return True   # too large to be a suite: load_rules says so
        return b"rules" in path.read_bytes()
    except OSError:
        return False


@click.command("accept")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--rules", "rules_path", type=click.Path(path_type=Path), default=None,
              help="Rules YAML. Default: the 'rules:' of the acceptance suite itself "
                   "(for a run folder: its suite.yaml copy).")
@click.option("--baseline", type=click.Path(path_type=Path), default=None,
              help="Run folder that within_pct_of rules compare against.")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), default=None,
              help="Write JUnit XML (one testcase per check) for CI systems.")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="HTML verdict report (Markdown twin next to it). Default: RUN/accept.html.")
@click.option("--localize/--no-localize", default=None,
              help="Name slow hosts/GPUs from per-rank samples (default: as the rules file says).")
@click.option("--dry-run", is_flag=True, help="print the suite's schedule of waves (priced with "
                                              "--launch-cost or --estimate-from); run nothing")
@click.option("--launch-cost", default=None, metavar="DURATION", help="with --dry-run: as for `run`")
@click.option("--estimate-from", type=click.Path(path_type=Path, exists=True, file_okay=False), default=None,
              metavar="RUN", help="with --dry-run: as for `run`")
def accept_cmd(target: Path, rules_path: Path | None, baseline: Path | None,
               junit_path: Path | None, out: Path | None, localize: bool | None, dry_run: bool = False,
               launch_cost: str | None = None, estimate_from: Path | None = None) -> None:
    """Pass/fail a run folder (or run an acceptance suite first) against rules.

    Exit status: 0 every check passed, 1 a check failed, 2 bad input (or a suite that cannot run
    here; with --junit, the JUnit file then holds one testcase in error saying why).
    """
    from .accept.junit import junit_error_xml

    if dry_run or launch_cost or estimate_from:
        from ..launch.waves import print_dry_run

        print_dry_run(target, dry_run, launch_cost, estimate_from)
        return
    if junit_path is not None:
        _check_writable(junit_path, "--junit")
    try:
        _accept(target, rules_path, baseline, junit_path, out, localize)
    except CommbenchError as exc:
        if junit_path is not None:   # CI gets a report that says why, not a missing file
            with _writing(junit_path, "--junit"):
                junit_path.write_text(junit_error_xml(Path(target).stem, str(exc)))
            click.echo(f"wrote {junit_path} (one error: the acceptance could not be judged)", err=True)
        raise


def _accept(target: Path, rules_path: Path | None, baseline: Path | None,
            junit_path: Path | None, out: Path | None, localize: bool | None) -> None:
    from ..runfolder import is_run_folder
    from ..runfolder.reader import load_run
    from .accept.junit import junit_xml
    from .accept.rules import LocalizeSettings, load_rules
    from .accept.verdict import accept_document, evaluate, machine_warnings, verdict_table
    from .text_table import terminal_width, text_table

    if rules_path is None:
        own = target / "suite.yaml" if is_run_folder(target) else target
        if not _suite_has_rules(own):
            raise CommbenchError(f"no rules for {target}: pass --rules FILE, or use an acceptance "
                                 "suite with a top-level 'rules:' list.")
        rules_path = own
    ruleset = load_rules(rules_path)  # validate before spending time on a run
    if out is not None:
        _check_writable(_twin_paths(out)[0], "--out")
    if localize is True and ruleset.localize is None:
        ruleset = replace(ruleset, localize=LocalizeSettings())
    elif localize is False:
        ruleset = replace(ruleset, localize=None)
    base_run = load_run(baseline) if baseline is not None else None
    if is_run_folder(target):
        run_dir = target
    elif target.is_file() and target.suffix in (".yaml", ".yml"):
        try:
            from ..launch.orchestrate import run_suite
        except ImportError as exc:
            raise CommbenchError(f"cannot run suite {target} here ({exc}); run it with "
                                 "`commbench run` and pass the run folder to accept.") from None
        from .finish import finish

        try:
            run_dir = Path(run_suite(Path(target), out_dir=None, finish=finish))
        except KeyboardInterrupt:
            click.echo("commbench: interrupted; every row measured so far is in the run folder",
                       err=True)
            sys.exit(130)
    else:
        raise CommbenchError(f"{target} is neither a run folder (with results.csv) nor a suite "
                             "YAML file.")
    run = load_run(run_dir)
    verdicts, findings = evaluate(run, ruleset, base_run)
    warnings = machine_warnings(run, base_run)
    click.echo(text_table(verdict_table(verdicts), wrap="reason", width=terminal_width()))
    html_path, md_path = _write_both(accept_document(run, ruleset, verdicts, findings, warnings),
                                     out or run_dir / "accept.html")
    click.echo(f"wrote {html_path} and {md_path}")
    if junit_path is not None:
        with _writing(junit_path, "--junit"):
            junit_path.write_text(junit_xml(verdicts, ruleset.path.stem, warnings))
        click.echo(f"wrote {junit_path}")
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    failed = sum(not v.passed for v in verdicts)
    click.echo(f"{'FAIL' if failed else 'PASS'}: {failed} of {len(verdicts)} checks failed"
               + ("; the machine was busy (warning above): times may be slow or noisy" if warnings else ""))
    sys.exit(1 if failed else 0)
