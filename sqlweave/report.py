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
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlweave.data import BIRD_LEVELS, SPIDER_LEVELS
from sqlweave.evaluate import has_candidates, oracle_hit, read_records
from sqlweave.stats import Interval, PairedComparison, bootstrap_ci, outcomes_by_id, paired

__all__ = [
    "ERROR_CLASSES",
    "Run",
    "error_class",
    "load_run",
    "render_report",
    "write_report",
]

CORRECT = "correct"
WRONG_RESULT = "wrong result"
SYNTAX = "syntax error"
UNKNOWN_NAME = "unknown column/table"
TIMEOUT = "timeout"
LM_FAILURE = "LM failure"
OTHER = "other"

#: Every class a record falls in, in the order the plots show them.
ERROR_CLASSES = (CORRECT, WRONG_RESULT, SYNTAX, UNKNOWN_NAME, TIMEOUT, LM_FAILURE, OTHER)

_CLASS_COLOURS = {
    CORRECT: "#4c9a5b",
    WRONG_RESULT: "#e0a030",
    SYNTAX: "#c2453d",
    UNKNOWN_NAME: "#8c5fb0",
    TIMEOUT: "#4a7fb5",
    LM_FAILURE: "#3b3b3b",
    OTHER: "#9a9a9a",
}

#: ``error_kind`` values written by the evaluator (``sqlweave.db.QueryError.kind``) and their class.
_KIND_CLASSES: Mapping[str, str] = {
    "syntax": SYNTAX,
    "unknown_column": UNKNOWN_NAME,
    "unknown_table": UNKNOWN_NAME,
    "timeout": TIMEOUT,
    "lm": LM_FAILURE,
    "lm_error": LM_FAILURE,
}

#: A program failure (``error_kind`` ``program``) whose text says the model, not the SQL, failed:
#: a server down, a timeout or rate limit of the endpoint, a prompt over the context window.
_LM_TEXT = re.compile(
    r"APIConnectionError|APIError|ServiceUnavailable|RateLimit|AuthenticationError|"
    r"Connection (refused|error|reset)|context (window|length)|ContextWindowExceeded|"
    r"litellm|openai\.|llama_cpp|\bLM\b|language model|BadRequestError",
    re.I,
)

#: For records without a known kind (older files, other engines): the error text decides.
_TEXT_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (TIMEOUT, re.compile(r"timed out|timeout|interrupt|canceling statement", re.I)),
    (
        SYNTAX,
        re.compile(r"syntax error|parse error|incomplete input|unrecognized token", re.I),
    ),
    (
        UNKNOWN_NAME,
        re.compile(
            r"no such (column|table)|unknown (column|table)|(column|relation) .* does not exist",
            re.I,
        ),
    ),
)


def error_class(record: Mapping[str, Any]) -> str:
    """The :data:`ERROR_CLASSES` entry of one evaluation record.

    A correct record is ``correct``; a miss whose SQL ran is a ``wrong result``; a miss with an
    error is classed by its ``error_kind`` when the evaluator recorded one it knows, else by the
    error text, else ``other`` (no SQL, a program failure, a runtime error such as an ambiguous
    column). A failed model call (the endpoint down, rate-limited, a prompt over the context
    window) is an ``LM failure``, its own class: it says nothing about the program's SQL.
    """
    if record.get("correct"):
        return CORRECT
    error = record.get("error")
    if not error:
        return WRONG_RESULT
    if record.get("error_kind") == "program" and _LM_TEXT.search(str(error)):
        return LM_FAILURE
    kind = _KIND_CLASSES.get(str(record.get("error_kind") or ""))
    if kind is not None:
        return kind
    for name, pattern in _TEXT_RULES:
        if pattern.search(str(error)):
            return name
    return OTHER


@dataclass
class Run:
    """One evaluation run: a display name, its records and its provenance (may be empty)."""

    name: str
    records: list[dict[str, Any]]
    path: Path | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.records)

    def outcomes(self) -> dict[str, bool]:
        """``{question_id: correct}``."""
        return outcomes_by_id(self.records)

    def ex(self) -> Interval:
        """EX over all records, with its 95% bootstrap interval."""
        return bootstrap_ci([bool(r.get("correct")) for r in self.records])

    def ex_by_level(self) -> dict[str, Interval]:
        """EX per difficulty level (benchmark order), with intervals."""
        levels: dict[str, list[bool]] = {}
        for r in self.records:
            levels.setdefault(_level(r), []).append(bool(r.get("correct")))
        return {level: bootstrap_ci(levels[level]) for level in _ordered_levels(levels)}

    def classes(self) -> dict[str, int]:
        """How many records fall in each error class."""
        counts = dict.fromkeys(ERROR_CLASSES, 0)
        for r in self.records:
            counts[error_class(r)] += 1
        return counts

    def tokens(self) -> list[float]:
        """Prompt + completion tokens per question, for records that carry usage."""
        out = []
        for r in self.records:
            usage = r.get("usage") or {}
            if "prompt_tokens" in usage or "completion_tokens" in usage:
                out.append(float(usage.get("prompt_tokens") or 0))
                out[-1] += float(usage.get("completion_tokens") or 0)
        return out

    def seconds(self) -> list[float]:
        """Seconds the program took per question."""
        return [float(r["seconds"]) for r in self.records if r.get("seconds") is not None]

    def calls(self, field: str = "calls") -> list[float]:
        """LM calls per question (``field="cached_calls"``: those answered from DSPy's cache)."""
        values = [(r.get("usage") or {}).get(field) for r in self.records]
        return [float(v) for v in values if v is not None]

    def ex_by_database(self) -> dict[str, Interval]:
        """EX per ``db_id`` (sorted by name), with intervals."""
        dbs: dict[str, list[bool]] = {}
        for r in self.records:
            dbs.setdefault(str(r.get("db_id") or "?"), []).append(bool(r.get("correct")))
        return {db: bootstrap_ci(dbs[db]) for db in sorted(dbs)}

    def oracle_ex(self) -> Interval | None:
        """EX had the best candidate been chosen: a question counts when its answer or any of
        its ``candidates`` is correct. None when no record carries candidates."""
        if not has_candidates(self.records):
            return None
        return bootstrap_ci([oracle_hit(r) for r in self.records])


def _level(record: Mapping[str, Any]) -> str:
    return str(record.get("difficulty") or "unknown")


def _ordered_levels(levels: Any) -> list[str]:
    known = (*SPIDER_LEVELS, *BIRD_LEVELS)
    return sorted(levels, key=lambda lv: (known.index(lv) if lv in known else len(known), lv))


def load_run(path: str | Path, name: str | None = None) -> Run:
    """A :class:`Run` from an evaluation JSONL file (named after the file unless ``name``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no evaluation records at {path}")
    records = read_records(path)
    if not records:
        raise ValueError(f"{path} holds no evaluation records")
    return Run(name or path.stem, records, path, read_provenance(path))


#: Provenance fields shown per run, in order.
PROVENANCE_FIELDS = ("program", "switches", "model", "artifact", "commit")


def read_provenance(path: str | Path) -> dict[str, Any]:
    """What a run was: program, switches, model, the artefact's content hash, the commit.

    From ``<path>.run.json`` (written by ``evaluate``: its ``_run`` identity, and the commit the
    CLI adds beside it), else from an experiment's summary ``<stem>.json`` with the same keys;
    empty when neither exists or neither reads. Never raises: a report without provenance is
    still a report.
    """
    path = Path(path)
    found: dict[str, Any] = {}
    for candidate, part in (
        (path.with_name(path.name + ".run.json"), "_run"),
        (path.with_suffix(".json"), None),
    ):
        if not candidate.is_file() or candidate == path:
            continue
        try:
            payload = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(payload, dict):
            continue
        body = payload.get(part) if part else payload
        if not isinstance(body, dict):
            continue
        found = {k: body.get(k) for k in PROVENANCE_FIELDS if body.get(k) is not None}
        extra = payload.get("provenance") if isinstance(payload.get("provenance"), dict) else {}
        found.update({k: v for k, v in extra.items() if k in PROVENANCE_FIELDS and v})
        if found:
            break
    return found


# --- figures ---------------------------------------------------------------------------------------


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


def plot_ex_by_difficulty(runs: Sequence[Run]) -> str:
    """Grouped bars: EX per difficulty (and overall) per run, with 95% interval whiskers."""
    levels = _ordered_levels({_level(r) for run in runs for r in run.records})
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


def paired_against_first(runs: Sequence[Run]) -> list[tuple[Run, PairedComparison | None]]:
    """Each run after the first compared with the first (``None`` when they share no question)."""
    base = runs[0].outcomes()
    out: list[tuple[Run, PairedComparison | None]] = []
    for run in runs[1:]:
        try:
            out.append((run, paired(run.outcomes(), base)))
        except ValueError:
            out.append((run, None))
    return out


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


def judged(run: Run) -> tuple[list[float], list[bool]]:
    """The run's answers that carry a confidence: (confidences, right or not)."""
    rows = [r for r in run.records if isinstance(r.get("confidence"), int | float)]
    return [float(r["confidence"]) for r in rows], [bool(r.get("correct")) for r in rows]


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
        "(10 bins), accuracy of the most confident 50 / 70 / 90 %, and the answers at or above "
        "the shipped threshold.</p>",
        _table(
            ["run", "n", "AUROC", "calibration error", "right at 50/70/90 %", "kept, right"],
            [
                [
                    run.name,
                    f["n"],
                    "–" if f["auroc"] is None else f"{f['auroc']:.3f}",
                    f"{f['ece']:.3f}",
                    f"{f['acc_at_50']:.1f} / {f['acc_at_70']:.1f} / {f['acc_at_90']:.1f}",
                    f"{f['coverage_above']:.1f} %, "
                    + ("–" if f["precision_above"] is None else f"{f['precision_above']:.1f} %"),
                ]
                for run, f in figures
            ],
        ),
        _img(plot_confidence(runs), "reliability diagram and risk-coverage curve"),
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
            f"{html.escape(_level(first))}</span></td>",
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


def render_report(runs: Sequence[Run], title: str = "sqlweave evaluation report") -> str:
    """The HTML page (a string) for ``runs``; the first run is the baseline of the comparisons."""
    if not runs:
        raise ValueError("a report needs at least one run")
    levels = _ordered_levels({_level(r) for run in runs for r in run.records})
    with_oracle = any(run.oracle_ex() is not None for run in runs)
    parts = [
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
        "<h2>Paired differences against the first run</h2>",
    ]
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
    parts += [
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
    runs = [load_run(p, names[i] if names else None) for i, p in enumerate(paths)]
    _dedupe_names(runs)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_report(runs, title=title), encoding="utf-8")
    return out


def _dedupe_names(runs: Sequence[Run]) -> None:
    """Two files with the same stem (runs/a/x.jsonl, runs/b/x.jsonl) get their folder in the name."""
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.name] = seen.get(run.name, 0) + 1
    for run in runs:
        if seen[run.name] > 1 and run.path is not None:
            run.name = f"{run.path.parent.name}/{run.name}"
