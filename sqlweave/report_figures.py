"""The report's figures: matplotlib plots of evaluation runs, each returned as a PNG data URI.

A data URI keeps the page self-contained (it opens anywhere, mailed or attached to an issue).
The object-oriented API draws without pyplot's global state, so figures are safe in threads.
matplotlib is the optional ``report`` extra; it is imported only when a figure is drawn.
"""

from __future__ import annotations

import base64
import functools
import io
import math
from collections.abc import Callable, Sequence
from typing import Any

from sqlweave.report_runs import (
    CORRECT,
    ERROR_CLASSES,
    LM_FAILURE,
    OTHER,
    SYNTAX,
    TIMEOUT,
    UNKNOWN_NAME,
    WRONG_RESULT,
    Run,
    judged,
    level_of,
    ordered_levels,
)
from sqlweave.stats import Interval, PairedComparison

_CLASS_COLOURS = {
    CORRECT: "#4c9a5b",
    WRONG_RESULT: "#e0a030",
    SYNTAX: "#c2453d",
    UNKNOWN_NAME: "#8c5fb0",
    TIMEOUT: "#4a7fb5",
    LM_FAILURE: "#3b3b3b",
    OTHER: "#9a9a9a",
}


def _plain_text(plot: Callable[..., str]) -> Callable[..., str]:
    """Run a plot with matplotlib's maths parsing off: a run named ``cost_$5_vs_$10`` is text,
    not a formula (it failed the report, or showed other labels than the tables)."""

    @functools.wraps(plot)
    def plain(*args: Any, **kwargs: Any) -> str:
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return plot(*args, **kwargs)

    return plain


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as err:  # optional dependency
        raise ImportError("reports need matplotlib: pip install 'sqlweave[report]'") from err
    # The object-oriented API: no pyplot state, no backend selection, safe in threads.
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _png_uri(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _colours(n: int) -> list[str]:
    palette = ["#4a7fb5", "#e0803a", "#4c9a5b", "#c2453d", "#8c5fb0", "#8c6d4f", "#d47fb5"]
    return [palette[i % len(palette)] for i in range(n)]


@_plain_text
def plot_ex_by_difficulty(runs: Sequence[Run]) -> str:
    """Grouped bars: EX per difficulty (and overall) per run, with 95% interval whiskers."""
    levels = ordered_levels({level_of(r) for run in runs for r in run.records})
    groups = [*levels, "all"]
    fig = _figure(9, 4.2)
    ax = fig.add_subplot()
    width = 0.8 / len(runs)
    for i, (run, colour) in enumerate(zip(runs, _colours(len(runs)), strict=True)):
        by_level = run.ex_by_level()
        cells = [
            by_level.get(level, Interval(math.nan, math.nan, math.nan, 0)) for level in groups[:-1]
        ]
        cells.append(run.ex())
        xs = [g + (i - (len(runs) - 1) / 2) * width for g in range(len(groups))]
        heights = [100 * c.estimate for c in cells]
        lows = [100 * (c.estimate - c.low) for c in cells]
        highs = [100 * (c.high - c.estimate) for c in cells]
        ax.bar(xs, heights, width, label=run.name, color=colour, alpha=0.85)
        ax.errorbar(xs, heights, yerr=[lows, highs], fmt="none", ecolor="#333", capsize=3, lw=1)
        for x, c in zip(xs, cells, strict=True):
            if c.n:
                ax.annotate(f"n={c.n}", (x, 1), ha="center", va="bottom", fontsize=7, color="white")
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylim(0, 105)
    ax.set_ylabel("execution accuracy (%)")
    ax.set_title("EX per difficulty, 95% bootstrap intervals")
    fig.legend(fontsize=8, ncols=min(len(runs), 4), loc="outside lower center")
    ax.grid(axis="y", alpha=0.3)
    return _png_uri(fig)


@_plain_text
def plot_paired(
    runs: Sequence[Run], comparisons: Sequence[tuple[Run, PairedComparison | None]]
) -> str:
    """Forest plot: each run's EX minus the first run's, paired, with interval and McNemar p."""
    fig = _figure(9, 0.6 * len(comparisons) + 1.6)
    ax = fig.add_subplot()
    names = []
    for y, (run, cmp) in enumerate(comparisons):
        names.append(run.name)
        if cmp is None:
            ax.annotate("no shared questions", (0, y), ha="center", va="center", fontsize=8)
            continue
        ax.errorbar(
            [100 * cmp.delta],
            [y],
            xerr=[[100 * (cmp.delta - cmp.diff.low)], [100 * (cmp.diff.high - cmp.delta)]],
            fmt="o",
            color="#4a7fb5",
            capsize=4,
        )
        ax.annotate(
            f"{100 * cmp.delta:+.1f} pts  p={cmp.p_value:.3g}  (+{cmp.only_a} / -{cmp.only_b}, n={cmp.n})",
            (100 * cmp.diff.high, y),
            xytext=(6, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.axvline(0, color="#555", lw=1, ls="--")
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlim(-105, 140)
    ax.set_xlabel(f"EX difference against {runs[0].name} (points, paired bootstrap 95%)")
    ax.set_title("Paired differences against the first run (McNemar exact p)")
    ax.grid(axis="x", alpha=0.3)
    return _png_uri(fig)


@_plain_text
def plot_error_classes(runs: Sequence[Run]) -> str:
    """Stacked horizontal bars: the share of each error class per run."""
    fig = _figure(9, 0.55 * len(runs) + 1.6)
    ax = fig.add_subplot()
    lefts = [0.0] * len(runs)
    counts = [run.classes() for run in runs]
    for cls in ERROR_CLASSES:
        shares = [100 * c[cls] / max(run.n, 1) for c, run in zip(counts, runs, strict=True)]
        ax.barh(
            range(len(runs)), shares, left=lefts, color=_CLASS_COLOURS[cls], label=cls, height=0.6
        )
        for y, (left, share, c) in enumerate(zip(lefts, shares, counts, strict=True)):
            if share >= 6:
                ax.annotate(
                    str(c[cls]),
                    (left + share / 2, y),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white",
                )
        lefts = [a + b for a, b in zip(lefts, shares, strict=True)]
    ax.set_yticks(range(len(runs)), [run.name for run in runs])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of questions (%)")
    ax.set_title("Outcome per question: correct, or why not")
    fig.legend(fontsize=8, ncols=len(ERROR_CLASSES), loc="outside lower center")
    return _png_uri(fig)


@_plain_text
def plot_cost(runs: Sequence[Run]) -> str:
    """Box plots side by side: tokens per question and seconds per question, per run."""
    fig = _figure(9, 3.8)
    for i, (title, values_of) in enumerate(
        (
            ("tokens per question (prompt + completion)", Run.tokens),
            ("seconds per question", Run.seconds),
        )
    ):
        ax = fig.add_subplot(1, 2, i + 1)
        data = [values_of(run) for run in runs]
        shown = [(run.name, d) for run, d in zip(runs, data, strict=True) if d]
        if shown:
            ax.boxplot(
                [d for _, d in shown],
                tick_labels=[name for name, _ in shown],
                orientation="horizontal",
                showmeans=True,
            )
            ax.invert_yaxis()
        else:
            ax.annotate(
                "no data in these records", (0.5, 0.5), xycoords="axes fraction", ha="center"
            )
            ax.set_yticks([])
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="x", alpha=0.3)
    return _png_uri(fig)


@_plain_text
def plot_confidence(runs: Sequence[Run]) -> str:
    """A reliability diagram (10 bins of at least 5 answers) and a risk-coverage curve."""
    import numpy as np

    fig = _figure(9, 3.8)
    rel, risk = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    rel.plot([0, 1], [0, 1], ls=":", c="grey")
    for run, colour in zip(runs, _colours(len(runs)), strict=True):
        scores, labels = judged(run)
        if not scores:
            continue
        s, y = np.asarray(scores), np.asarray(labels, dtype=float)
        edges = np.linspace(0, 1, 11)
        xs, ys = [], []
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            inside = (s >= lo) & ((s < hi) if hi < 1 else (s <= hi))
            if inside.sum() >= 5:
                xs.append(s[inside].mean())
                ys.append(y[inside].mean())
        rel.plot(xs, ys, marker="o", color=colour, label=run.name)
        order = np.argsort(-s, kind="stable")
        kept = np.arange(1, len(order) + 1)
        risk.plot(kept / len(order), 1 - np.cumsum(y[order]) / kept, color=colour, label=run.name)
    rel.set_title("reliability: share right per confidence bin", fontsize=10)
    rel.set_xlabel("confidence")
    risk.set_title("risk-coverage: error among the most confident answers", fontsize=10)
    risk.set_xlabel("coverage")
    for ax in (rel, risk):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _png_uri(fig)
