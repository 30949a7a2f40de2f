"""Fleet: a placed run over many nodes or pairs read as a fleet, not one curve per node: the units
that stand out ranked (robust z, GPU health flags), per-size distributions with the outliers named,
and pair heatmaps (node x node) that stay readable at 1,024 nodes, with the full matrix and the
full ranking in CSV files beside the report. Data: analysis/report/fleet.py; figures: fleet_plots.py."""
from __future__ import annotations

import re

from ....runfolder import files
from .. import curve_band, fleet
from ..document import Link
from ..fleet_plots import FULL_LABELLED, MAX_PARTNERS, WORST_NODES, distribution_figure, pair_heatmap
from ..plots import figure_png
from .base import ReportSection


def applies(report) -> bool:
    return fleet.applies(report.rows)


def add(doc, report) -> None:
    panels = fleet.panels(report.rows)
    flags = fleet.health_flags(report.runs)
    nodes = fleet.fleet_nodes(report.rows)
    sec = doc.section("Fleet")
    units = sorted({p.unit for p in panels})
    sec.text(f"{len(nodes)} nodes measured one by one or in pairs ({', '.join(units) or 'no'} placements). Each "
             f"{' or '.join(units) or 'unit'} is scored against the others per kind of point: the median over "
             f"message sizes of its {panels[0].metric if panels else 'metric'} over the per-size median of all "
             "of them (speed vs others: 1.0 typical, 0.5 half as fast), and a robust z of that score (median and "
             "MAD across them). From pairs, each node also gets the median of its pairs' scores, so the node "
             "common to slow pairs stands out while a bad link stays one slow pair. GPU health: the run's "
             "health records judged by the default health rules (docs/accept.md, \"Health\").")
    ranked = fleet.ranked(panels, flags)
    _ranked(sec.sub("Outliers and unhealthy nodes, ranked"), ranked, report)
    if panels:
        sub = sec.sub("Distributions per message size")
        sub.text("A box per size over every node or pair (p25-p75, the median, whiskers p1-p99); the outliers "
                 f"(a robust z of {curve_band.OUTLIER_Z:g} or more either way, and {curve_band.MIN_EFFECT:.0%} or more "
                 f"off) drawn over it and named, at most {curve_band.MAX_LABELLED} per panel (the table lists them "
                 "all); of pairs, a node that stands out is drawn as the median of its pairs.")
        sub.image(figure_png(distribution_figure(panels, flags)), "per-size distributions across the fleet",
                  "fleet-distributions.png")
    for i, p in enumerate(x for x in panels if x.unit == "pair"):
        _heatmap(sec.sub(f"Pair heatmap: {p.label}"), p, flags, report, i)


def _ranked(sub, ranked, report) -> None:
    sub.text("Nodes that fail GPU health first (each once, whatever its timings), then by the size of the "
             "robust z. From pairs, a node is scored by the median of its pairs; the outlier pairs of a node "
             "listed are counted on its line, not listed one by one (a slow pair of two ordinary nodes: a link).")
    shown = ranked.head(fleet.TOP_ROWS)
    sub.table(shown, "none: no node or pair stands out, and no GPU fails health")
    if len(ranked) > len(shown):
        sub.text(f"{len(ranked) - len(shown)} more line(s): in the CSV below.")
    _csv(sub, report, "fleet-ranked.csv", ranked.to_csv(index=False), "every ranked line (CSV)")


def _heatmap(sub, p, flags, report, index: int) -> None:
    matrix = fleet.pair_matrix(p)
    nodes = fleet.node_scores(p)
    if len(matrix) <= FULL_LABELLED:
        sub.text("Each cell: the pair's speed against the other pairs (1.0 typical; red slower, green faster; "
                 "blank: not measured). A bad node is a red row and column, a bad link one red cell.")
    else:
        sub.text(f"{len(matrix)} nodes: left, every node by name, pooled into blocks (a block shows its worst "
                 f"pair); right, {min(WORST_NODES, len(nodes))} nodes (those that stand out or fail health, the "
                 f"two ends of each slow pair, then the slowest by the median of their pairs), each against its "
                 f"partners, slowest first (up to {MAX_PARTNERS}): a node slow with every "
                 "partner is the node, one slow partner a link. [health]: the node fails GPU health.")
    name = f"fleet-{_safe(p.label)}-{index}"
    sub.image(figure_png(pair_heatmap(p, matrix, nodes, flags)), f"pair heatmap {p.label}", f"{name}.png")
    _csv(sub, report, f"{name}-matrix.csv", matrix.to_csv(float_format="%.4f"),
         f"the full {len(matrix)} x {len(matrix)} matrix of pair speeds (CSV)")


def _csv(sub, report, name: str, text: str, what: str) -> None:
    """A CSV written beside the report and linked (only when the report's folder is known)."""
    if report.out_dir is None:
        return
    try:
        files.replace_whole(report.out_dir, name, text.encode())
    except OSError as exc:
        sub.text(f"{what}: not written ({exc.strerror or exc}).")
        return
    sub.items.append(Link(f"{what}: {name}", name))


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-")[:60] or "panel"


SECTION = ReportSection("fleet", 22, add, applies)
