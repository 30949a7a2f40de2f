"""Click commands `report`, `compare`, `accept` (wired into the CLI group by commbench/cli.py)."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import click

from commbench.errors import CommbenchError

from .report import html, markdown
from ..runfolder.reader import is_run_folder, load_run


def _twin_paths(out: Path) -> tuple[Path, Path]:
    out = Path(out)
    html_path = out if out.suffix in (".html", ".htm") else out.with_suffix(".html")
    return html_path, html_path.with_suffix(".md")


def _write_both(doc, out: Path) -> tuple[Path, Path]:
    html_path, md_path = _twin_paths(out)
    if not html_path.parent.is_dir():
        raise CommbenchError(f"output folder {html_path.parent} does not exist or is not a folder; create it or pick "
                             "another --out.")
    with _writing(html_path):
        html.write(doc, html_path)
    with _writing(md_path):
        markdown.write(doc, md_path)
    return html_path, md_path


@contextmanager
def _writing(path: Path):
    """An output that cannot be written (read-only folder, a dangling link, a full disk) is a
    one-line error, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise CommbenchError(f"cannot write {path}: {exc.strerror or exc}; pick another --out") from None


@click.command("report")
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="HTML file to write (a Markdown twin goes next to it). "
                   "Default: RUN/report.html for one run, ./report.html for several.")
def report_cmd(runs: tuple[Path, ...], out: Path | None) -> None:
    """Build a self-contained HTML report and a Markdown twin from one or more run folders."""
    from .report.build import build_report

    loaded = [load_run(r) for r in runs]
    if out is None:
        out = runs[0] / "report.html" if len(runs) == 1 else Path("report.html")
    html_path, md_path = _write_both(build_report(loaded), out)
    click.echo(f"wrote {html_path} and {md_path}")


@click.command("compare")
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--threshold", "threshold_pct", type=float, default=5.0, show_default=True,
              help="Smallest change of the median time, in percent, that counts as better/worse.")
@click.option("--alpha", type=float, default=0.05, show_default=True,
              help="Significance level of the Mann-Whitney U test on per-iteration samples.")
@click.option("--fail-above", "fail_above_pct", type=float, default=None,
              help="Exit with status 1 when any point is worse by more than PCT percent.")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="HTML file to write (a Markdown twin goes next to it). Default: print only.")
def compare_cmd(base: Path, new: Path, threshold_pct: float, alpha: float,
                fail_above_pct: float | None, out: Path | None) -> None:
    """Compare run NEW against run BASE point by point (ratios NEW/BASE, significance, verdicts)."""
    from .compare import (CompareSettings, compare_document, compare_runs, regressions,
                                   summarize)

    if threshold_pct < 0 or not 0 < alpha < 1:
        raise CommbenchError(f"--threshold must be >= 0 and --alpha in (0, 1); got {threshold_pct}, {alpha}.")
    b, n = load_run(base), load_run(new)
    settings = CompareSettings(threshold_pct=threshold_pct, alpha=alpha)
    points = compare_runs(b, n, settings)
    click.echo(markdown.table_md(summarize(points)) if not points.empty else "no points to compare")
    if out is not None:
        html_path, md_path = _write_both(compare_document(b, n, points, settings), out)
        click.echo(f"wrote {html_path} and {md_path}")
    if fail_above_pct is not None and not points.empty:
        bad = regressions(points, fail_above_pct)
        if len(bad):
            click.echo(f"{len(bad)} point(s) worse by more than {fail_above_pct:g}%", err=True)
            sys.exit(1)


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
def accept_cmd(target: Path, rules_path: Path | None, baseline: Path | None,
               junit_path: Path | None, out: Path | None, localize: bool | None) -> None:
    """Pass/fail a run folder (or run an acceptance suite first) against rules.

    Exit status: 0 every check passed, 1 a check failed, 2 bad input.
    """
    from .accept.verdict import accept_document, evaluate, junit_xml, verdict_table
    from .accept.rules import LocalizeSettings, load_rules

    if rules_path is None:
        own = target / "suite.yaml" if is_run_folder(target) else target
        if not _suite_has_rules(own):
            raise CommbenchError(f"no rules for {target}: pass --rules FILE, or use an acceptance "
                                 "suite with a top-level 'rules:' list.")
        rules_path = own
    ruleset = load_rules(rules_path)  # validate before spending time on a run
    if localize is True and ruleset.localize is None:
        ruleset = replace(ruleset, localize=LocalizeSettings())
    elif localize is False:
        ruleset = replace(ruleset, localize=None)
    base_run = load_run(baseline) if baseline is not None else None
    if is_run_folder(target):
        run_dir = target
    elif target.is_file() and target.suffix in (".yaml", ".yml"):
        try:
            from commbench.launch.orchestrate import run_suite
        except ImportError as exc:
            raise CommbenchError(f"cannot run suite {target} here ({exc}); run it with "
                                 "`commbench run` and pass the run folder to accept.") from None
        run_dir = Path(run_suite(Path(target), out_dir=None))
    else:
        raise CommbenchError(f"{target} is neither a run folder (with results.csv) nor a suite "
                             "YAML file.")
    run = load_run(run_dir)
    verdicts, findings = evaluate(run, ruleset, base_run)
    click.echo(markdown.table_md(verdict_table(verdicts)))
    html_path, md_path = _write_both(accept_document(run, ruleset, verdicts, findings),
                                     out or run_dir / "accept.html")
    click.echo(f"wrote {html_path} and {md_path}")
    if junit_path is not None:
        with _writing(junit_path):
            junit_path.write_text(junit_xml(verdicts, ruleset.path.stem))
        click.echo(f"wrote {junit_path}")
    failed = sum(not v.passed for v in verdicts)
    click.echo(f"{'FAIL' if failed else 'PASS'}: {failed} of {len(verdicts)} checks failed")
    sys.exit(1 if failed else 0)
