"""`commbench compare BASE NEW`: point by point, each change weighed against the point's noise; with
--fail-above a gate CI can trust (exit 0 pass, 1 regression, 3 inconclusive), and with --confirm a
regression kept only if it reproduces on this machine (commands/confirm.py). It lives with the
commands that measure because --confirm does; without it, it reads stored run folders only.

pandas and scipy are imported inside the command: `commbench --help` does not pay for them."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import click

from ..analysis.outputs import write_both, writing
from ..errors import CommbenchError


def _check_compare_options(threshold_pct: float, alpha: float, fail_above_pct: float | None,
                           allow_inconclusive: bool, confirm_n: int) -> None:
    if not (math.isfinite(threshold_pct) and threshold_pct >= 0) or not 0 < alpha < 1:
        raise CommbenchError(f"--threshold must be a finite number >= 0 and --alpha in (0, 1); got "
                             f"{threshold_pct}, {alpha}.")
    if fail_above_pct is not None and not (math.isfinite(fail_above_pct) and fail_above_pct >= 0):
        raise CommbenchError(f"--fail-above must be a finite percentage >= 0; got {fail_above_pct} (a NaN or "
                             "infinite gate would pass every point).")
    if allow_inconclusive and fail_above_pct is None:
        raise CommbenchError("--allow-inconclusive changes what the gate does: give it with --fail-above PCT.")
    if confirm_n and fail_above_pct is None:
        raise CommbenchError("--confirm re-measures the points the gate finds worse: give it with --fail-above PCT.")


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
              help="A gate: exit 1 when any point is worse (beyond its noise) by more than PCT percent, "
                   "or a point of BASE is missing, not ok or not comparable in NEW (listed); exit 3 "
                   "(inconclusive) when a point compare can't tell moved up by more than PCT, or no point "
                   "could be judged; else 0.")
@click.option("--allow-inconclusive", is_flag=True,
              help="With --fail-above: let points compare can't tell pass (exit 0 instead of 3), as "
                   "before exit status 3 existed.")
@click.option("--confirm", "confirm_n", type=click.IntRange(0, 20), default=0, metavar="N",
              help="With --fail-above: measure the NEW Cases found worse again on this machine, N passes "
                   "(each pass runs every one of them once), and judge them again against BASE: a "
                   "regression that does not reproduce no longer fails (docs/report.md)")
@click.option("--confirm-out", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="with --confirm: the folder of the fresh runs (DIR/repeat-1 ...; default a new "
                   "folder under results/)")
@click.option("--json", "json_out", type=click.Path(path_type=Path, allow_dash=True), default=None,
              help="Write every point's verdict, reason and numbers, the counts and the exit status as "
                   "JSON to this file ('-': standard output; the text then goes to standard error).")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="HTML file to write (a Markdown twin goes next to it). Default: print only.")
def compare_cmd(runs: tuple[Path, ...], threshold_pct: float, alpha: float, correction: str,
                fail_above_pct: float | None, allow_inconclusive: bool, confirm_n: int,
                confirm_out: Path | None, json_out: Path | None, out: Path | None) -> None:
    """Compare NEW against BASE point by point: `compare BASE NEW`, or several run folders per
    side, `compare B1 B2 vs N1 N2`. A folder written by `run --repeat N` counts as its N runs.
    Ratios are NEW/BASE; verdicts weigh each change against the point's noise.

    Exit status with --fail-above: 0 pass, 1 a regression (or a point lost), 2 bad input, 3
    inconclusive (points it cannot tell; --allow-inconclusive passes them)."""
    from ..analysis.compare import CompareSettings, compare_runs, regressions
    from ..analysis.compare_gate import gate
    from ..analysis.runsets import expand, load_side, split_sides
    from ..sysinfo.load import describe

    _check_compare_options(threshold_pct, alpha, fail_above_pct, allow_inconclusive, confirm_n)
    base_paths, new_paths = split_sides(runs)
    if confirm_n:
        from .confirm import check_confirm_out, suite_file_of

        suite_file_of(expand(new_paths))   # exit 2 before anything is compared or measured
        check_confirm_out(confirm_out)
    b, n = load_side(base_paths), load_side(new_paths)
    settings = CompareSettings(threshold_pct=threshold_pct, alpha=alpha, correction=correction)
    points = compare_runs(b, n, settings)
    confirmation = None
    if confirm_n and not points.empty:
        from .confirm import confirm
        from .start import stopping_cleanly

        with stopping_cleanly(resume_hint=""):
            confirmation = confirm(points, regressions(points, fail_above_pct), b, n, settings,
                                   fail_above_pct, confirm_n, confirm_out, quiet=True)
        points = confirmation.points
    outcome = gate(points, fail_above_pct, allow_inconclusive) if fail_above_pct is not None else None
    warnings = [w for w in (describe(str(r.path), r.meta) for r in b + n) if w]
    _tell(points, settings, (b, n), (base_paths, new_paths), outcome, fail_above_pct, allow_inconclusive,
          warnings, confirmation, json_out, out)
    if outcome is not None:
        sys.exit(outcome.exit_status)


def _tell(points, settings, sides, paths, outcome, fail_above_pct, allow_inconclusive, warnings,
          confirmation, json_out: Path | None, out: Path | None) -> None:
    """The terminal's lines, the HTML/Markdown pair and the JSON, all from the same points."""
    from ..analysis.compare_gate import json_document
    from ..analysis.compare_summary import compare_document, point_lines, summarize, terminal_summary
    from ..analysis.runsets import expand, side_label
    from ..analysis.text_table import text_table

    (b, n), to_stdout = sides, json_out is not None and str(json_out) == "-"

    def say(text: str, err: bool = False) -> None:
        click.echo(text, err=err or to_stdout)

    say(f"compare {side_label(b)} -> {side_label(n)}")
    say("\n".join(terminal_summary(points, settings, fail_above_pct)))
    if confirmation is not None:
        say(confirmation.sentence)
    if not points.empty:
        shared = points[points["why"].astype(str).str.contains("shared one GPU", regex=False)]
        if len(shared):   # say why, not only "not comparable"
            say(f"{len(shared)} point(s) not comparable: {shared['why'].iloc[0]}", err=True)
    for w in warnings:
        say(f"warning: {w}", err=True)
    if out is not None:
        doc = compare_document(side_label(b), side_label(n), points, settings, warnings, outcome)
        html_path, md_path = write_both(doc, out)
        say(f"wrote {html_path} and {md_path}")
    if json_out is not None:
        extra = None if confirmation is None else {"confirm": {
            "sentence": confirmation.sentence, "runs": str(confirmation.folder or "")}}
        text = json_document(points, summarize(points), settings, (side_label(b), side_label(n)),
                             (expand(paths[0]), expand(paths[1])), outcome, fail_above_pct,
                             allow_inconclusive, warnings, extra)
        if to_stdout:
            click.echo(text)
        else:
            with writing(json_out, "--json"):
                Path(json_out).write_text(text + "\n")
            say(f"wrote {json_out}")
    if outcome is None:
        return
    if len(outcome.failing):
        say(f"\nfailing points ({len(outcome.failing)}):")
        say(text_table(point_lines(points, outcome.failing, why=True)))
    say(outcome.sentence, err=outcome.exit_status != 0)
