"""A learned selector: the execution vote's classes scored by a linear model fitted on train.

The vote counts how many candidates agree; it cannot see that the majority answers a different
question. Where the 1.5B model's vote is wrong but some candidate is right, the two answers
usually differ in a way the question names: "for each investor" and a query without
``GROUP BY``; "how many" and no ``COUNT``; "both" and no ``INTERSECT``; an ``IN (SELECT ...)``
where Spider's gold joins and keeps the duplicate rows; a value the question spells otherwise,
a table it never names. :func:`class_features` turns each result class into numbers (its share
of the vote, its result's shape, its SQL's shape, those crossed with cues in the question, and
:func:`alignment` of the query's values and names with the question's words);
:class:`RankSelector` scores each class with weights fitted on ``spider-train-select`` (a
conditional logit: one choice among a question's classes, ``experiments/fit_reranker.py``) and
picks the best, the vote's order breaking ties. A gate (``max_share``) can keep the vote
wherever its top class holds more than that share; the packaged weights have none (their
cross-validation chose none).

No LM call; it needs every candidate (a class the vote counted out may still score best), so a
sampler feeding it does not stop early (:func:`~sqlweave.programs.stages.sampling.settle_for` settles only
the plain vote). The weights ship with the package (``reranker_weights.json``); a user can fit
their own on their train questions (:func:`fit_weights` on their classes) and pass them as
``weights=``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import dspy
from sqlglot import exp

from sqlweave import sqlstruct
from sqlweave.db import Database, QueryResult
from sqlweave.programs.stages.feedback import FEEDBACK_TIMEOUT_S
from sqlweave.programs.stages.voting import (
    ExecutionGroup,
    VoteResult,
    VoteSelector,
    overturned,
    ranked_groups,
)
from sqlweave.schema_filter import stem, words

#: The weights fitted on ``spider-train-select`` (``experiments/fit_reranker.py``).
WEIGHTS_FILE = Path(__file__).with_name("reranker_weights.json")

# --- what the question asks for ---------------------------------------------------------------

_CUES: dict[str, re.Pattern[str]] = {
    "count": re.compile(r"\b(how many|number of|count)\b"),
    "average": re.compile(r"\b(average|mean|avg)\b"),
    "total": re.compile(r"\b(total|sum|combined)\b"),
    "each": re.compile(r"\b(each|every|per|for all|for different|by each)\b"),
    "distinct": re.compile(r"\b(different|distinct|unique)\b"),
    "superlative": re.compile(
        r"\b(most|least|fewest|highest|lowest|largest|smallest|biggest|maximum|minimum|max|min|"
        r"top|best|worst|oldest|youngest|latest|earliest|longest|shortest|greatest|\w+est)\b"
    ),
    "both": re.compile(r"\b(both|and also|as well as|shared|in common)\b"),
    "negation": re.compile(r"\b(not|no|never|without|neither|nor|except|other than)\b|n't\b"),
    "order": re.compile(
        r"\b(order|ordered|sort|sorted|ascending|descending|alphabetical|alphabetically|rank)"
    ),
    "either": re.compile(r"\b(or|either)\b"),
    "descending": re.compile(
        r"\b(descending|decreasing|most|highest|largest|biggest|greatest|maximum|top|latest|"
        r"oldest|longest|best)\b"
    ),
    "more_than": re.compile(
        r"\b(more than|less than|at least|at most|greater|fewer|above|below)\b"
    ),
}


def question_cues(question: str) -> dict[str, bool]:
    """Which of the cues a question holds (lower-cased word patterns; no LM)."""
    text = question.lower()
    return {name: bool(pattern.search(text)) for name, pattern in _CUES.items()}


_LISTED = re.compile(r",| and ")


def asked_columns(question: str) -> int:
    """A rough count of the things a question asks for: 1 + its commas and "and"s."""
    return 1 + len(_LISTED.findall(question.lower()))


# --- what a query does --------------------------------------------------------------------------

_SQL_PATTERNS: dict[str, re.Pattern[str]] = {
    "count": re.compile(r"\bcount\s*\(", re.I),
    "avg": re.compile(r"\bavg\s*\(", re.I),
    "sum": re.compile(r"\bsum\s*\(", re.I),
    "maxmin": re.compile(r"\b(max|min)\s*\(", re.I),
    "group_by": re.compile(r"\bgroup\s+by\b", re.I),
    "order_by": re.compile(r"\border\s+by\b", re.I),
    "limit": re.compile(r"\blimit\b", re.I),
    "distinct": re.compile(r"\bdistinct\b", re.I),
    "having": re.compile(r"\bhaving\b", re.I),
    "intersect": re.compile(r"\bintersect\b", re.I),
    "union": re.compile(r"\bunion\b", re.I),
    "except": re.compile(r"\bexcept\b|\bnot\s+in\b|\bnot\s+exists\b", re.I),
    "in_subquery": re.compile(r"\bin\s*\(\s*select\b", re.I),
    "subquery": re.compile(r"\(\s*select\b", re.I),
    "like": re.compile(r"\blike\b", re.I),
    "or": re.compile(r"\bor\b|\bin\s*\(\s*'", re.I),
    "not_equal": re.compile(r"!=|<>", re.I),
    "compare": re.compile(r"[<>]=?", re.I),
    "desc": re.compile(r"\bdesc\b", re.I),
}
_JOIN = re.compile(r"\bjoin\b", re.I)


def sql_shape(sql: str) -> dict[str, float]:
    """What a query uses, by keyword (1.0 / 0.0), and how many joins it has."""
    shape = {name: float(bool(p.search(sql))) for name, p in _SQL_PATTERNS.items()}
    shape["joins"] = float(len(_JOIN.findall(sql)))
    return shape


#: Question cue -> the query shapes that answer it (crossed in :func:`class_features`).
_CROSSINGS: dict[str, tuple[str, ...]] = {
    "count": ("count", "group_by"),
    "average": ("avg",),
    "total": ("sum", "count"),
    "each": ("group_by", "count", "order_by"),
    "distinct": ("distinct", "group_by"),
    "superlative": ("order_by", "limit", "maxmin", "desc", "group_by"),
    "both": ("intersect", "joins"),
    "negation": ("except", "not_equal"),
    "order": ("order_by", "limit"),
    "descending": ("desc",),
    "either": ("or", "union"),
    "more_than": ("compare", "having"),
}


# --- how a query's names and values match the question's words --------------------------------

_STOP = frozenset(
    "a an the of in on at to for from by with and or is are was were be been what which who whom "
    "whose how many much list show give find return tell me all each every their its his her "
    "that this these those there than more less most least do does did has have had as per".split()
)
_WORD = re.compile(r"[a-z]+|\d+(?:\.\d+)?")
_NUMBER_WORDS = {
    "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
    "eight": "8", "nine": "9", "ten": "10", "once": "1", "twice": "2", "single": "1",
}  # fmt: skip


def _name_words(identifier: str) -> set[str]:
    """The words of a schema name: ``Student_Course_Registrations`` -> student, course, registration."""
    return {stem(w) for w in words(identifier) if len(w) > 1}


def _named(names: set[str], question_words: set[str]) -> bool:
    """Does the question name one of these words (same stem, or one a >= 4-letter prefix)?"""
    for w in names:
        for q in question_words:
            if w == q or (min(len(w), len(q)) >= 4 and (w.startswith(q) or q.startswith(w))):
                return True
    return False


def _written(value: str, text: str) -> bool:
    """``value`` stands in ``text`` as a whole (not 'F' inside "France")."""
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text) is not None


def _share(part: float, whole: int) -> float:
    return part / whole if whole else 0.0


def alignment(question: str, sql: str) -> dict[str, float]:
    """How a query's values, tables and columns match the question's words (``align_*``).

    The vote cannot see that the majority compares ``Location`` with 'Female' the question never
    wrote, spells 'YES' where the question's own value is 'Yes', or joins a table the question
    never names; these count such things. No schema, no database: the query and the question."""
    tree = sqlstruct.parse(sql)
    if tree is None:
        return {"align_unparsed": 1.0}
    q_lower = question.lower()
    q_words = {stem(w) for w in _WORD.findall(q_lower) if w not in _STOP}
    q_numbers = set(re.findall(r"\d+(?:\.\d+)?", question)) | {
        d for w, d in _NUMBER_WORDS.items() if re.search(rf"\b{w}\b", q_lower)
    }
    literals = list(tree.find_all(exp.Literal))
    strings = [lit.this.strip("%") for lit in literals if lit.is_string and lit.this.strip("%")]
    numbers = [
        lit.this
        for lit in literals
        if not lit.is_string
        and not isinstance(lit.parent, exp.Limit)
        and lit.this not in {"0", "1"}
    ]
    exact = sum(_written(s, question) for s in strings)
    nocase = sum(not _written(s, question) and _written(s.lower(), q_lower) for s in strings)
    tables = {t.name for t in tree.find_all(exp.Table) if t.name}
    projected = [
        c.name for sel in tree.find_all(exp.Select) for e in sel.expressions
        for c in e.find_all(exp.Column) if c.name
    ]  # fmt: skip
    filtered = [
        c.name for w in tree.find_all(exp.Where) for c in w.find_all(exp.Column) if c.name
    ]  # fmt: skip
    sql_words: set[str] = set()
    for name in tables | {c.name for c in tree.find_all(exp.Column)}:  # projected, filtered too
        sql_words |= _name_words(name)
    for s in strings:
        sql_words |= {stem(w) for w in _WORD.findall(s.lower())}
    content = {w for w in q_words if not w.isdigit()}
    n_strings = len(strings)
    return {
        "align_unparsed": 0.0,
        "align_has_literal": float(n_strings > 0),
        "align_literal_exact": _share(exact, n_strings),
        "align_literal_case": _share(nocase, n_strings),
        "align_literal_absent": _share(n_strings - exact - nocase, n_strings),
        "align_number_absent": float(sum(n not in q_numbers for n in numbers)),
        "align_tables": float(len(tables)),
        "align_tables_unnamed": float(sum(not _named(_name_words(t), q_words) for t in tables)),
        "align_projected_unnamed": _share(
            sum(not _named(_name_words(c), q_words) for c in projected), len(projected)
        ),
        "align_filtered_unnamed": _share(
            sum(not _named(_name_words(c), q_words) for c in filtered), len(filtered)
        ),
        "align_question_covered": _share(
            sum(_named({w}, sql_words) for w in content), len(content)
        ),
    }


# --- a result class as numbers ------------------------------------------------------------------


def _has_duplicates(result: QueryResult) -> bool:
    return len(set(result.rows)) < len(result.rows)


def _has_null(result: QueryResult) -> bool:
    return any(value is None for row in result.rows for value in row)


def _n_cols(result: QueryResult) -> int:
    return len(result.columns) if result.columns else (len(result.rows[0]) if result.rows else 0)


def _cells(result: QueryResult) -> frozenset[str]:
    """A result's distinct cell values, as text (numbers by value: 3 and 3.0 alike)."""
    return frozenset(
        repr(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)
        for row in result.rows
        for v in row
    )


_TOKEN = re.compile(r"[a-z_][a-z0-9_]*|\d+|'[^']*'|[<>=!]+", re.I)


def _tokens(sql: str) -> frozenset[str]:
    return frozenset(t.lower() for t in _TOKEN.findall(sql))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def class_features(
    question: str,
    candidates: Sequence[str],
    groups: Sequence[ExecutionGroup],
    greedy: Sequence[bool] | None = None,
) -> list[dict[str, float]]:
    """One feature dict per class of ``groups`` (same order).

    ``greedy[i]``: candidate ``i`` was decoded greedily (default: only the first). SQL shapes are
    the mean over a class's members (how much of the class uses a ``JOIN``, a ``DISTINCT``...).
    """
    if greedy is None:
        greedy = [i == 0 for i in range(len(candidates))]
    total = sum(g.weight for g in groups) or 1.0
    top = ranked_groups(groups)[0] if groups else None
    cues = question_cues(question)
    asked = asked_columns(question)
    rows = [len(g.result.rows) for g in groups]
    cols = [_n_cols(g.result) for g in groups]
    cells = [_cells(g.result) for g in groups]
    tokens = [_tokens(candidates[g.first]) for g in groups]
    memo: dict[str, dict[str, float]] = {}  # a class's members often repeat one query

    def aligned_by_sql(sql: str) -> dict[str, float]:
        if sql not in memo:
            memo[sql] = alignment(question, sql)
        return memo[sql]

    out = []
    for i, (g, n_rows, n_cols) in enumerate(zip(groups, rows, cols, strict=True)):
        # How much the other classes' answers and queries share with this one (a soft vote,
        # MBR-style): a minority answer that the others nearly give, with a column more or a
        # filter less, is the consensus the exact vote cannot see.
        others = [j for j in range(len(groups)) if j != i]
        rest = sum(groups[j].weight for j in others) or 1.0
        shapes = [sql_shape(candidates[m]) for m in g.members]
        shape = {k: sum(s[k] for s in shapes) / len(shapes) for k in shapes[0]}
        f: dict[str, float] = {
            "share": g.weight / total,
            "log_count": math.log1p(len(g.members)),
            "is_top": float(g is top),
            "greedy": float(any(greedy[m] for m in g.members)),
            "empty": float(g.empty),
            "null": float(_has_null(g.result)),
            "duplicates": float(_has_duplicates(g.result)),
            "log_rows": math.log1p(n_rows),
            "one_row": float(n_rows == 1),
            "cols": float(n_cols),
            "most_cols": float(n_cols == max(cols) and len(set(cols)) > 1),
            "fewest_cols": float(n_cols == min(cols) and len(set(cols)) > 1),
            "most_rows": float(n_rows == max(rows) and len(set(rows)) > 1),
            "fewest_rows": float(n_rows == min(rows) and len(set(rows)) > 1),
            "soft_values": sum(groups[j].weight * _jaccard(cells[i], cells[j]) for j in others)
            / rest,
            "soft_contained": sum(
                groups[j].weight * (len(cells[i] & cells[j]) / len(cells[i]) if cells[i] else 0.0)
                for j in others
            )
            / rest,
            "soft_sql": sum(groups[j].weight * _jaccard(tokens[i], tokens[j]) for j in others)
            / rest,
        }
        f.update({f"sql_{k}": v for k, v in shape.items()})
        aligned = [aligned_by_sql(candidates[m]) for m in g.members]
        for k in sorted({k for a in aligned for k in a}):  # a fixed order: files regenerate alike
            f[k] = sum(a.get(k, 0.0) for a in aligned) / len(aligned)
        for cue, answers in _CROSSINGS.items():
            sign = 1.0 if cues[cue] else -1.0
            for k in answers:
                f[f"{cue}_x_{k}"] = sign * shape[k]
        f["each_x_cols"] = (1.0 if cues["each"] else -1.0) * float(n_cols)
        f["cols_gap"] = abs(n_cols - asked)
        f["count_x_one_row"] = (1.0 if cues["count"] else -1.0) * f["one_row"]
        out.append(f)
    return out


def gated(top_share: float, max_share: float) -> bool:
    """May the weights overturn a vote whose top class holds ``top_share`` of it?"""
    return top_share <= max_share + 1e-9


def score(features: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """The linear score of one class (names missing from ``weights`` count 0)."""
    return sum(weights.get(name, 0.0) * value for name, value in features.items())


@cache
def _packaged() -> dict[str, Any]:
    return json.loads(WEIGHTS_FILE.read_text(encoding="utf-8"))


@cache
def default_weights() -> dict[str, float]:
    """The packaged weights (fitted on ``spider-train-select``)."""
    return {str(k): float(v) for k, v in _packaged()["weights"].items()}


def default_max_share() -> float:
    """The packaged gate: the weights may overturn a vote whose top class holds at most this
    share of it (1.0: any vote; cross-validation on ``spider-train-select`` chose no gate)."""
    return float(_packaged().get("max_share", 1.0))


def rank(
    question: str,
    candidates: Sequence[str],
    groups: Sequence[ExecutionGroup],
    weights: Mapping[str, float],
    greedy: Sequence[bool] | None = None,
    max_share: float = 1.0,
) -> ExecutionGroup | None:
    """The best-scoring class (the vote's order breaks ties); None when there is none. Where
    the vote's top class holds more than ``max_share`` of it (its ``share`` feature, as the
    fitting script's replay reads it), the vote's top class."""
    if not groups:
        return None
    feats = {
        id(g): f
        for g, f in zip(groups, class_features(question, candidates, groups, greedy), strict=True)
    }
    ordered = ranked_groups(groups)
    if not gated(feats[id(ordered[0])]["share"], max_share):
        return ordered[0]
    return max(ordered, key=lambda g: score(feats[id(g)], weights))  # max keeps the first of ties


class RankSelector(VoteSelector):
    """The ``ranked`` selector: execution classes scored by a fitted linear model (module doc).

    Follows the selector protocol of :mod:`sqlweave.programs.stages`; no LM call. The vote runs
    first (its classes and order); the best-scoring class replaces its winner. ``weights``: a
    mapping of feature name to weight (default: the packaged ones). ``max_share``: overturn the
    vote only when its top class holds at most this share of it (default: the packaged gate).
    """

    settles_early = False  # a class the vote counted out may still score best

    def __init__(
        self,
        weights: Mapping[str, float] | None = None,
        timeout_s: float = FEEDBACK_TIMEOUT_S,
        max_share: float | None = None,
    ) -> None:
        super().__init__(timeout_s=timeout_s)
        self.weights = dict(weights) if weights is not None else None
        self.max_share = max_share

    def forward(  # type: ignore[override]
        self,
        candidates: Sequence[str],
        db: Database | str | Path,
        question: str = "",
        weights: Sequence[float] | None = None,
        **_: Any,
    ) -> dspy.Prediction:
        voted = super().forward(candidates, db, weights)
        result: VoteResult = voted.vote
        best = rank(
            question,
            list(candidates),
            result.groups,
            self.weights or default_weights(),
            max_share=default_max_share() if self.max_share is None else self.max_share,
        )
        if best is None:
            return voted
        return overturned(candidates, result, best)


# --- fitting the weights ------------------------------------------------------------------------
#
# A class row is one question's execution classes as ``experiments/fit_reranker.py classes``
# writes them from a recorded run: ``{"question_id", "classes": [{"features": class_features(...),
# "correct": bool, "vote_rank": int}, ...], "fallback_correct": bool}`` (``fallback_correct``: the
# verdict of the question's first candidate, the answer when no candidate ran).


def class_design(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[tuple[Any, int]]:
    """``(features matrix, index of the right class)`` for every question of ``rows`` a selector
    can change (two classes or more, exactly one of them right), columns in ``names`` order."""
    import numpy as np

    out = []
    for row in rows:
        classes = row["classes"]
        right = [i for i, c in enumerate(classes) if c["correct"]]
        if len(classes) < 2 or len(right) != 1:
            continue
        x = np.array([[c["features"].get(n, 0.0) for n in names] for c in classes], dtype=float)
        out.append((x, right[0]))
    return out


def fit_weights(
    rows: Sequence[Mapping[str, Any]], l2: float = 1.0, drop: Sequence[str] = ()
) -> dict[str, float]:
    """Weights for :class:`RankSelector` fitted on class rows (section comment above): a
    conditional logit, one softmax over each question's classes, maximising the mean
    log-likelihood of the right class minus ``l2``·|w|²/2n; features named in ``drop`` are left
    out. Raises ValueError when no question has a right and a wrong class."""
    import numpy as np
    from scipy.optimize import minimize

    names = sorted({n for row in rows for c in row["classes"] for n in c["features"]} - set(drop))
    data = class_design(rows, names)
    if not data:
        raise ValueError("no question with a right and a wrong class to fit on")
    n = len(data)
    # All questions' classes stacked, one softmax per question's segment (reduceat), so one
    # loss evaluation is a few array operations whatever the number of questions.
    x_all = np.vstack([x for x, _ in data])
    starts = np.cumsum([0] + [len(x) for x, _ in data[:-1]])
    owner = np.repeat(np.arange(n), [len(x) for x, _ in data])
    right = starts + np.array([y for _, y in data])

    def loss(w: Any) -> tuple[float, Any]:
        s = x_all @ w
        s -= np.maximum.reduceat(s, starts)[owner]
        e = np.exp(s)
        p = e / np.add.reduceat(e, starts)[owner]
        total = -np.log(p[right] + 1e-12).sum()
        grad = -(x_all[right].sum(axis=0) - p @ x_all)
        return total / n + l2 * (w @ w) / (2 * n), grad / n + l2 * w / n

    res = minimize(loss, np.zeros(len(names)), jac=True, method="L-BFGS-B")
    return {name: float(v) for name, v in zip(names, res.x, strict=True)}


def replay_choices(
    rows: Sequence[Mapping[str, Any]],
    weights: Mapping[str, float] | None,
    max_share: float = 1.0,
) -> dict[str, bool]:
    """Per question of the class rows: is the class the selector chooses right?
    ``weights=None`` replays the vote (its top class); weights overturn it only where its top
    class holds at most ``max_share`` of it, as :func:`rank` does. A question without classes
    keeps its ``fallback_correct``."""
    out = {}
    for row in rows:
        classes = row["classes"]
        if not classes:
            out[row["question_id"]] = row["fallback_correct"]
            continue
        ordered = sorted(classes, key=lambda c: c["vote_rank"])
        if weights is None or not gated(ordered[0]["features"]["share"], max_share):
            best = ordered[0]
        else:
            best = max(ordered, key=lambda c: score(c["features"], weights))
        out[row["question_id"]] = best["correct"]
    return out
