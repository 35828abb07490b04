"""One self-contained HTML page about evaluation runs: accuracy, paired differences, errors, cost.

``sqlweave report RUN.jsonl [RUN2.jsonl ...]`` reads the JSONL records that
:func:`sqlweave.evaluate.evaluate` writes and renders, with matplotlib, the figures a reader needs
to judge a run or compare several on the same questions:

- EX per difficulty with 95% bootstrap intervals, runs side by side;
- each later run against the first on the questions both answered: the paired difference with its
  bootstrap interval and McNemar's exact p-value (:mod:`sqlweave.stats`);
- error classes (syntax error, unknown column/table, wrong result, timeout, other), from each
  record's error kind and text;
- tokens and seconds per question;
- EX per database, each run's provenance (program, switches, model, commit: read from the
  ``<run>.jsonl.run.json`` that ``evaluate`` writes beside its records, else from an experiment's
  ``<run>.json`` summary), oracle EX where records carry ``candidates`` (each with ``correct``);
- a per-question table (question, gold, each run's SQL and outcome), filtered by radio buttons
  and CSS alone (the page carries no script): gained or lost against the first run, all wrong,
  LM failures.

Plots are PNG data URIs inside the page, so the file can be mailed or attached to an issue and
opens anywhere without a server or network access. matplotlib is the optional ``report`` extra.

This module is the page; what a run's records say (error classes, :class:`Run`, provenance) is
:mod:`sqlweave.report_runs`, and the plots are :mod:`sqlweave.report_figures`. Their names stay
importable from here.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlweave.report_figures import (
    plot_confidence,
    plot_cost,
    plot_error_classes,
    plot_ex_by_difficulty,
    plot_paired,
)
from sqlweave.report_runs import (
    CORRECT,
    ERROR_CLASSES,
    LM_FAILURE,
    Run,
    error_class,
    judged,
    level_of,
    load_run,
    ordered_levels,
    paired_against_first,
)
from sqlweave.report_runs import OTHER as OTHER  # re-exported: importable from here as before
from sqlweave.report_runs import PROVENANCE_FIELDS as PROVENANCE_FIELDS
from sqlweave.report_runs import SYNTAX as SYNTAX
from sqlweave.report_runs import TIMEOUT as TIMEOUT
from sqlweave.report_runs import UNKNOWN_NAME as UNKNOWN_NAME
from sqlweave.report_runs import WRONG_RESULT as WRONG_RESULT
from sqlweave.report_runs import read_provenance as read_provenance
from sqlweave.stats import PairedComparison

__all__ = [
    "ERROR_CLASSES",
    "Run",
    "error_class",
    "load_run",
    "render_report",
    "write_report",
]


# --- the page --------------------------------------------------------------------------------------

_CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1000px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.88em; margin: 0.6em 0; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f4f4f4; }
img { max-width: 100%; display: block; margin: 0.6em 0; }
.note { color: #666; font-size: 0.85em; }
code { font-size: 0.9em; }
table.questions { width: 100%; table-layout: fixed; }
table.questions th, table.questions td { text-align: left; vertical-align: top;
                                         overflow-wrap: anywhere; }
table.questions th:nth-child(1) { width: 15%; } table.questions th:nth-child(2) { width: 9%; }
table.questions th:nth-child(3) { width: 20%; }
table.questions code { white-space: pre-wrap; }
td.ok { background: #e7f3e9; } td.miss { background: #fbeaea; } td.lm { background: #e6e6e6; }
.filters label { margin-right: 1em; font-size: 0.9em; }
.filters input { margin-right: 0.25em; }
"""

#: The per-question filters: (id, label, the row class it shows; None shows every row).
_FILTERS = (
    ("all", "all", None),
    ("gained", "gained against the first run", "gained"),
    ("lost", "lost against the first run", "lost"),
    ("wrong", "wrong in every run", "allwrong"),
    ("lm", "an LM failure", "lmfail"),
)


def _filter_css() -> str:
    """Radio buttons that hide rows with CSS alone: the page stays script-free."""
    rules = [
        f"#qf-{fid}:checked ~ table.questions tbody tr:not(.{cls}) {{ display: none; }}"
        for fid, _, cls in _FILTERS
        if cls
    ]
    return "<style>" + "\n".join(rules) + "</style>"


def _mean(values: Sequence[float]) -> str:
    return f"{sum(values) / len(values):.1f}" if values else "–"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{html.escape(alt)}">'


def _summary_rows(runs: Sequence[Run], with_oracle: bool = False) -> list[list[Any]]:
    rows = []
    for run in runs:
        errors = sum(r.get("error") is not None for r in run.records)
        oracle = run.oracle_ex()
        rows.append(
            [
                run.name,
                run.n,
                str(run.ex()),
                *(
                    [
                        str(oracle) if oracle is not None else "–",
                        f"{100 * (oracle.estimate - run.ex().estimate):.1f}"
                        if oracle is not None
                        else "–",
                    ]
                    if with_oracle
                    else []
                ),
                errors,
                _mean(run.calls()),
                _mean(run.calls("cached_calls")),
                _mean(run.tokens()),
                _mean(run.seconds()),
            ]
        )
    return rows


def _paired_rows(
    runs: Sequence[Run], comparisons: Sequence[tuple[Run, PairedComparison | None]]
) -> list[list[Any]]:
    rows = []
    for run, cmp in comparisons:
        if cmp is None:
            rows.append([run.name, 0, "–", "–", "–", "–", "–"])
            continue
        rows.append(
            [
                run.name,
                cmp.n,
                f"{100 * cmp.ex_a:.1f} vs {100 * cmp.ex_b:.1f}",
                f"{100 * cmp.delta:+.1f} [{100 * cmp.diff.low:+.1f}, {100 * cmp.diff.high:+.1f}]",
                cmp.only_a,
                cmp.only_b,
                f"{cmp.p_value:.3g}",
            ]
        )
    return rows


def _provenance_rows(runs: Sequence[Run]) -> list[list[Any]]:
    rows = []
    for run in runs:
        prov = run.provenance
        switches = prov.get("switches")
        shown = (
            " ".join(f"{k}={v}" for k, v in switches.items())
            if isinstance(switches, dict)
            else str(switches or "")
        )
        rows.append(
            [
                run.name,
                prov.get("program", "–"),
                shown or "(defaults)" if prov.get("program") else "–",
                prov.get("model", "–"),
                prov.get("artifact", "–"),
                str(prov.get("commit", "–"))[:12],
            ]
        )
    return rows


def _database_table(runs: Sequence[Run]) -> str:
    """EX per database, runs side by side (percent and n)."""
    per_run = [run.ex_by_database() for run in runs]
    databases = sorted({db for cells in per_run for db in cells})
    rows = []
    for db in databases:
        row: list[Any] = [db]
        for cells in per_run:
            cell = cells.get(db)
            row.append(f"{100 * cell.estimate:.1f} (n={cell.n})" if cell else "–")
        rows.append(row)
    return _table(["database", *(f"{run.name} EX %" for run in runs)], rows)


def _question_rows(runs: Sequence[Run]) -> list[tuple[str, dict[str, Any], list[Any]]]:
    """Per question id (first run's order, then the others'): its row classes, its fields and
    each run's record (None where that run did not answer it)."""
    by_run = [{str(r.get("question_id")): r for r in run.records} for run in runs]
    order: list[str] = []
    seen: set[str] = set()
    for records in by_run:
        for qid in records:
            if qid not in seen:
                seen.add(qid)
                order.append(qid)
    out = []
    for qid in order:
        cells = [records.get(qid) for records in by_run]
        first = next(c for c in cells if c is not None)
        marks = []
        base = cells[0]
        others = [c for c in cells[1:] if c is not None]
        if base is not None and others:
            if not base.get("correct") and any(c.get("correct") for c in others):
                marks.append("gained")
            if base.get("correct") and any(not c.get("correct") for c in others):
                marks.append("lost")
        if not any(c.get("correct") for c in cells if c is not None):
            marks.append("allwrong")
        if any(c is not None and error_class(c) == LM_FAILURE for c in cells):
            marks.append("lmfail")
        out.append((" ".join(marks), first, cells))
    return out


def _questions_section(runs: Sequence[Run]) -> list[str]:
    """The per-question table with its CSS-only filters."""
    rows = _question_rows(runs)
    counts = {cls: sum(cls in marks.split() for marks, _, _ in rows) for _, _, cls in _FILTERS}
    parts = [_filter_css(), '<div class="filters">']
    for fid, label, cls in _FILTERS:
        n = len(rows) if cls is None else counts[cls]
        checked = " checked" if cls is None else ""
        parts.append(
            f'<input type="radio" name="qf" id="qf-{fid}"{checked}>'
            f'<label for="qf-{fid}">{html.escape(label)} ({n})</label>'
        )
    # The inputs and the table are siblings inside the div, so the CSS filter (~) reaches rows.
    head = "".join(
        f"<th>{html.escape(h)}</th>"
        for h in ["question", "database", "gold SQL", *(run.name for run in runs)]
    )
    body = []
    for marks, first, cells in rows:
        tds = [
            f"<td>{html.escape(str(first.get('question') or ''))}"
            f'<br><span class="note">{html.escape(str(first.get("question_id")))} · '
            f"{html.escape(level_of(first))}</span></td>",
            f"<td>{html.escape(str(first.get('db_id') or ''))}</td>",
            f"<td><code>{html.escape(str(first.get('gold_sql') or ''))}</code></td>",
        ]
        for cell in cells:
            if cell is None:
                tds.append("<td>–</td>")
                continue
            cls = error_class(cell)
            css = "ok" if cls == CORRECT else "lm" if cls == LM_FAILURE else "miss"
            error = cell.get("error")
            detail = (
                f'<br><span class="note">{html.escape(str(error)[:300])}</span>' if error else ""
            )
            tds.append(
                f'<td class="{css}"><b>{html.escape(cls)}</b><br>'
                f"<code>{html.escape(str(cell.get('pred_sql') or ''))}</code>{detail}</td>"
            )
        body.append(f'<tr class="{marks}">' + "".join(tds) + "</tr>")
    parts.append(
        f'<table class="questions"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )
    return parts


def _confidence_section(runs: Sequence[Run]) -> list[str]:
    """Confidence figures and plots, when some run's records carry a confidence."""
    from sqlweave.confidence import confidence_figures

    figures = [(run, confidence_figures(*judged(run))) for run in runs if judged(run)[0]]
    if not figures:
        return []
    return [
        "<h2>Confidence</h2>",
        '<p class="note">Each answer\'s calibrated confidence (sqlweave.confidence) against '
        "whether it was right: AUROC (how well it ranks right above wrong), calibration error "
        "(10 bins; beside it, the median error a perfectly calibrated model with the same "
        "confidences shows on as many answers, and the share of such draws at least as far "
        "off: a small share means miscalibrated beyond chance), accuracy of the most confident "
        "50 / 70 / 90 %, and the answers at or above the shipped threshold.</p>",
        _table(
            [
                "run",
                "n",
                "AUROC",
                "calibration error (if calibrated, p)",
                "right at 50/70/90 %",
                "kept, right",
            ],
            [
                [
                    run.name,
                    f["n"],
                    "–" if f["auroc"] is None else f"{f['auroc']:.3f}",
                    f"{f['ece']:.3f} ({f['ece_if_calibrated']:.3f}, {f['ece_p']:.2f})",
                    f"{f['acc_at_50']:.1f} / {f['acc_at_70']:.1f} / {f['acc_at_90']:.1f}",
                    f"{f['coverage_above']:.1f} %, "
                    + ("–" if f["precision_above"] is None else f"{f['precision_above']:.1f} %"),
                ]
                for run, f in figures
            ],
        ),
        _img(plot_confidence(runs), "reliability diagram and risk-coverage curve"),
    ]


def render_report(runs: Sequence[Run], title: str = "sqlweave evaluation report") -> str:
    """The HTML page (a string) for ``runs``; the first run is the baseline of the comparisons."""
    if not runs:
        raise ValueError("a report needs at least one run")
    parts = [
        *_head_section(runs, title),
        *_summary_section(runs),
        *_difficulty_section(runs),
        *_paired_section(runs),
        *_confidence_section(runs),
        "<h2>Error classes</h2>",
        _img(plot_error_classes(runs), "error classes per run"),
        _table(["run", *ERROR_CLASSES], [[run.name, *run.classes().values()] for run in runs]),
        "<h2>Tokens and seconds per question</h2>",
        _img(plot_cost(runs), "tokens and seconds per question"),
        '<p class="note">Seconds are the program\'s wall time per question. Calls answered from '
        "DSPy's cache count no tokens and take almost no time, so a run replayed from the cache "
        "looks free: read the cached column of the summary first.</p>",
        "<h2>EX per database</h2>",
        _database_table(runs),
        "<h2>Questions</h2>",
        '<p class="note">Every question with each run\'s SQL and outcome. "Gained" and '
        '"lost" compare each later run with the first.</p>',
        *_questions_section(runs),
        "</body></html>",
    ]
    return "\n".join(parts)


def _head_section(runs: Sequence[Run], title: str) -> list[str]:
    """The page's head, title and the note saying what EX and the intervals are, and which
    files the page was made from (a page read later must say what it shows)."""
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        '<p class="note">EX is execution accuracy; intervals are 95% percentile bootstrap '
        f"(2,000 resamples). Generated {datetime.now(UTC):%Y-%m-%d %H:%M} UTC from "
        + ", ".join(
            f"<code>{html.escape(run.path.name if run.path else run.name)}</code>" for run in runs
        )
        + ".</p>",
    ]


def _summary_section(runs: Sequence[Run]) -> list[str]:
    """The summary table (oracle EX and the selection gap when records carry candidates) and
    the table of what each run was."""
    with_oracle = any(run.oracle_ex() is not None for run in runs)
    return [
        "<h2>Summary</h2>",
        _table(
            [
                "run",
                "n",
                "EX % [95% CI]",
                *(["oracle EX %", "selection gap (points)"] if with_oracle else []),
                "errors",
                "LM calls / q",
                "cached / q",
                "tokens / q",
                "seconds / q",
            ],
            _summary_rows(runs, with_oracle),
        ),
        *(
            [
                '<p class="note">Oracle EX counts a question when any candidate the program '
                "considered was correct: the ceiling a perfect selector would reach; the selection gap "
                "is oracle EX minus EX, what the program's selection lost.</p>"
            ]
            if with_oracle
            else []
        ),
        "<h2>Runs</h2>",
        _table(
            ["run", "program", "switches", "model", "artefact", "commit"], _provenance_rows(runs)
        ),
    ]


def _difficulty_section(runs: Sequence[Run]) -> list[str]:
    """EX per difficulty: the plot and its table, runs side by side."""
    levels = ordered_levels({level_of(r) for run in runs for r in run.records})
    return [
        "<h2>EX per difficulty</h2>",
        _img(plot_ex_by_difficulty(runs), "EX per difficulty with 95% intervals"),
        _table(
            ["run", *levels],
            [
                [
                    run.name,
                    *(
                        str(run.ex_by_level()[lv]) if lv in run.ex_by_level() else "–"
                        for lv in levels
                    ),
                ]
                for run in runs
            ],
        ),
    ]


def _paired_section(runs: Sequence[Run]) -> list[str]:
    """Each later run against the first on the questions both answered (one run: a hint)."""
    parts = ["<h2>Paired differences against the first run</h2>"]
    if len(runs) > 1:
        comparisons = paired_against_first(runs)
        parts += [
            f'<p class="note">Each run against <code>{html.escape(runs[0].name)}</code> on the '
            "questions both answered. +only / −only count the questions only that run / only the "
            "first got right; McNemar's exact test reads only those.</p>",
            _img(plot_paired(runs, comparisons), "paired EX differences against the first run"),
            _table(
                [
                    "run",
                    "shared n",
                    "EX run vs first",
                    "difference [95% CI]",
                    "+only",
                    "−only",
                    "McNemar p",
                ],
                _paired_rows(runs, comparisons),
            ),
        ]
    else:
        parts.append('<p class="note">One run: pass more files to compare them with the first.</p>')
    return parts


def write_report(
    paths: Sequence[str | Path],
    out: str | Path,
    *,
    title: str = "sqlweave evaluation report",
    names: Sequence[str] | None = None,
) -> Path:
    """Render the runs in ``paths`` (evaluation JSONL files) into the HTML file ``out``."""
    if names is not None and len(names) != len(paths):
        raise ValueError(f"{len(names)} names for {len(paths)} runs")
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"--out {out} is a folder; give the report's file path")
    for p in paths:
        if Path(p).resolve() == out.resolve():
            raise ValueError(f"--out {out} is one of the runs; writing there would replace it")
    runs = [load_run(p, names[i] if names else None) for i, p in enumerate(paths)]
    _dedupe_names(runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    try:
        # records of an older release may hold a lone surrogate a model wrote: shown as "?"
        tmp.write_text(render_report(runs, title=title), encoding="utf-8", errors="replace")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _dedupe_names(runs: Sequence[Run]) -> None:
    """Two files with the same stem (runs/a/x.jsonl, runs/b/x.jsonl) get their folder in the name."""
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.name] = seen.get(run.name, 0) + 1
    for run in runs:
        if seen[run.name] > 1 and run.path is not None:
            run.name = f"{run.path.resolve().parent.name}/{run.name}"
    counts: dict[str, int] = {}
    for run in runs:  # still the same (one file given twice): numbered
        counts[run.name] = counts.get(run.name, 0) + 1
        if counts[run.name] > 1:
            run.name = f"{run.name} ({counts[run.name]})"
