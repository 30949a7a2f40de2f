"""The training report's bar chart reads: its bar labels never overlap, measured from the drawn
text's bounding boxes (not guessed from lengths)."""
from __future__ import annotations

import itertools

import matplotlib.pyplot as plt
import pandas as pd

from commbench.analysis.report.training import overlap_figure


def overlapping_tick_labels(fig) -> list[tuple[str, str]]:
    """Pairs of tick labels of one axis whose drawn boxes intersect."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for ticks in (ax.get_xticklabels(), ax.get_yticklabels()):
            shown = [(t.get_text(), t.get_window_extent(renderer)) for t in ticks
                     if t.get_text() and t.get_visible()]
            for (ta, a), (tb, b) in itertools.combinations(shown, 2):
                if a.overlaps(b):
                    found.append((ta, tb))
    return found


def _rows(n_strategies: int, ops=("fsdp", "tp")) -> pd.DataFrame:
    rows = []
    for op in ops:
        for i in range(n_strategies):
            rows.append(dict(family="training", op=op, status="ok", model="llama-ish-8b",
                             strategy=f"reshard+prefetch hsdp {i}x2 overlap_grad_reduce",
                             reduce_dtype="bfloat16" if i % 2 else "float32", tokens_per_rank=4096 * (i + 1),
                             step_us=100.0 + i, compute_us=60.0, comm_us=50.0, exposed_comm_us=40.0,
                             idle_us=float(i)))
    return pd.DataFrame(rows)


def test_the_check_sees_overlapping_labels():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.bar(range(12), [1] * 12)
    ax.set_xticks(range(12))
    ax.set_xticklabels([f"a long strategy name {i}" for i in range(12)])
    assert overlapping_tick_labels(fig)
    plt.close(fig)


def test_training_bar_labels_never_overlap():
    for n in (1, 3, 8, 16):
        fig = overlap_figure(_rows(n))
        assert overlapping_tick_labels(fig) == [], n
        labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        assert all(len(line) <= 24 for lab in labels for line in lab.split("\n")), labels
        plt.close(fig)


def test_the_table_keeps_the_timed_step_the_profiled_one_and_the_shares():
    from commbench.analysis.report.training import overlap_table

    rows = _rows(2, ops=("fsdp",)).assign(time_us=95.0, compute_share_pct=60.0, exposed_share_pct=38.0,
                                         idle_share_pct=2.0)
    no_split = rows.iloc[:1].drop(columns=["step_us", "compute_us", "comm_us", "exposed_comm_us", "idle_us"])
    table = overlap_table(pd.concat([rows, no_split.assign(strategy="under --profile torch")]))
    cols = list(table.columns)
    assert cols.index("time_us") < cols.index("step_us") < cols.index("compute_share_pct")
    assert {"exposed_share_pct", "idle_share_pct"} <= set(cols)
    assert len(table) == 3   # a row without a split (timeline_note) stays in the table
