"""Judging an answer by its candidate pool: the evidence, the confidence and the alternatives.

A program that draws several candidates already holds what a person needs to know when not to
trust its answer: how the candidates' executions split, whether the answer's string values are
stored in the database (:func:`sqlweave.programs.stages.grounding.is_grounded`), whether it returns
nothing or only NULLs. :func:`evidence` turns a pool into those numbers
(:data:`sqlweave.confidence.FEATURES`) and :func:`assess` turns them into the calibrated
probability that the answer is right (the shipped models of :mod:`sqlweave.confidence`), with
the other readings the candidates gave. No LM call: the candidates are re-executed read-only
(the database's result cache makes that cheap right after the program ran them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlweave.confidence import (
    ALIGN_FEATURES,
    SHAPE_FEATURES,
    Calibrator,
    packaged_calibrators,
    packaged_threshold,
    recalibrated,
)
from sqlweave.db import Database, ExecutionError, QueryResult

#: Seconds a candidate may run while its pool is judged (the selectors' own limit).
EVIDENCE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Reading:
    """One distinct answer among the candidates: a representative SQL, its first rows and the
    share of candidates that returned it."""

    sql: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    share: float
    #: more rows than :data:`READING_ROWS` were returned (the preview says so)
    truncated: bool = False
    #: the answer's own reading (never shown as an alternative to itself)
    own: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "sql": self.sql,
            "columns": list(self.columns),
            "rows": [list(r) for r in self.rows],
            "truncated": self.truncated,
            "share": round(self.share, 3),
        }


#: Rows a reading keeps for its preview.
READING_ROWS = 5


@dataclass(frozen=True)
class Assessment:
    """``confidence`` in [0, 1] (None when there was nothing to judge: no SQL), ``low`` when it
    is under the shipped threshold, ``alternatives``: the other readings, most shared first."""

    confidence: float | None
    low: bool
    features: Mapping[str, float] = field(default_factory=dict)
    alternatives: tuple[Reading, ...] = ()


def _agree_with(result: QueryResult, groups: Sequence[Any]) -> int | None:
    from sqlweave.programs.stages.voting import equivalent

    for i, g in enumerate(groups):
        if equivalent(result, g.result, ordered=g.ordered) or equivalent(result, g.result):
            return i
    return None


def _normal(sql: str) -> str:
    """``sql`` compared as text: case and white space folded, a trailing ``;`` dropped."""
    return " ".join(sql.strip().rstrip(";").lower().split())


def evidence(
    question: str,
    candidates: Sequence[str],
    sql: str,
    db: Database,
    *,
    timeout_s: float = EVIDENCE_TIMEOUT_S,
    shape: bool = False,
) -> tuple[dict[str, float], list[Reading]]:
    """The pool's numbers for the answer ``sql`` (:data:`FEATURES`) and every distinct reading
    of ``candidates`` that runs, the answer's own first.

    ``agree``: the share of candidates whose result equals the answer's; ``margin``: that, less
    the largest share of another result; ``ran``: the share of candidates that ran;
    ``log_classes``: log of 1 + the number of distinct results; ``grounded``: the answer's
    string values are stored in the database; ``grounded_agree``: the share of the grounded
    candidates that agree with the answer; ``empty``, ``null``, ``one_row``: the answer's shape;
    ``same_sql``: the share of the agreeing candidates whose query text (case, white space and a
    trailing ``;`` folded) is the answer's; ``log_candidates``: log of the number of candidates
    drawn (empty ones too: a cascade that stopped drew 2, one that went on drew 8); the
    ``align_*`` numbers: how the answer's query matches the question's words
    (:func:`~sqlweave.programs.stages.reranker.alignment`; an unparsable query sets
    ``align_unparsed`` and leaves the others 0);
    with ``shape``, :func:`sql_shape`'s three too (the shipped models do not read them: rule 20
    found them no help, and they introspect the whole database).
    """
    from sqlweave.programs.stages.grounding import ValueLookup, is_grounded
    from sqlweave.programs.stages.reranker import alignment
    from sqlweave.programs.stages.voting import execution_groups, ranked_groups

    pool = [c for c in candidates if c] or [sql]
    groups, _ = execution_groups(pool, db, timeout_s=timeout_s)
    answer = db.try_execute(sql, timeout_s=timeout_s)
    n = len(pool)
    lookup = ValueLookup(db)
    ran = sum(len(g.members) for g in groups)
    own = None if isinstance(answer, ExecutionError) else _agree_with(answer, groups)
    agree = len(groups[own].members) / n if own is not None else 0.0
    others = [len(g.members) / n for i, g in enumerate(groups) if i != own]
    grounded_members = {i for g in groups for i in g.members if is_grounded(pool[i], lookup)}
    agreeing = set(groups[own].members) if own is not None else set()
    rows = () if isinstance(answer, ExecutionError) else answer.rows
    features = {
        "agree": agree,
        "margin": agree - max(others, default=0.0),
        "ran": ran / n,
        "log_classes": math.log1p(len(groups)),
        "grounded": float(is_grounded(sql, lookup)),
        "grounded_agree": len(agreeing & grounded_members) / len(grounded_members)
        if grounded_members
        else 0.0,
        "empty": float(not rows),
        "null": float(bool(rows) and all(v is None for r in rows for v in r)),
        "one_row": float(len(rows) == 1),
        "same_sql": sum(_normal(pool[i]) == _normal(sql) for i in agreeing) / len(agreeing)
        if agreeing
        else 0.0,
        "log_candidates": math.log(max(1, len(candidates))),
        **dict.fromkeys(ALIGN_FEATURES, 0.0),
        **alignment(question, sql),
        **(sql_shape(sql, db) if shape else {}),
    }
    mine = groups[own].first if own is not None else None
    readings = [
        Reading(
            pool[g.first],
            g.result.columns,
            g.result.rows[:READING_ROWS],
            len(g.members) / n,
            truncated=len(g.result.rows) > READING_ROWS or g.result.truncated,
            own=g.first == mine,
        )
        for g in ranked_groups(groups)
    ]
    readings.sort(key=lambda r: not r.own)  # stable: the answer's own first, then by share
    return features, readings


def sql_shape(sql: str, db: Database) -> dict[str, float]:
    """What the answer's query and its database look like, never read from gold:
    ``hardness``, Spider's level of ``sql`` as 0, 1/3, 2/3, 1 (1 when it does not parse);
    ``tables``, log(1 + the distinct tables it reads); ``schema_tables``, log(1 + the tables of
    the whole database). Harder queries over bigger schemas are wrong more often at the same vote
    (docs/decisions.md, rule 20)."""
    from sqlglot import exp

    from sqlweave.hardness import HARDNESS_LEVELS, spider_hardness
    from sqlweave.schema import introspect, unscoped
    from sqlweave.sqlstruct import parse

    try:
        level = HARDNESS_LEVELS.index(spider_hardness(sql, db.dialect)) / 3
    except ValueError:
        level = 1.0
    tree = parse(sql, db.dialect)
    read = {t.name.lower() for t in tree.find_all(exp.Table) if t.name} if tree else set()
    return {
        "hardness": level,
        "tables": math.log1p(len(read)),
        "schema_tables": math.log1p(len(introspect(unscoped(db)).tables)),
    }


def assess(
    question: str,
    candidates: Sequence[str],
    sql: str,
    db: Database,
    *,
    calibrators: Mapping[str, Calibrator] | None = None,
    threshold: float | None = None,
    max_alternatives: int = 2,
    recalibration: Mapping[str, float] | None = None,
) -> Assessment:
    """The answer's calibrated confidence and, after it, the other readings (module doc).

    ``candidates``: the pool the program chose among (``[sql]`` for a one-call program, which
    the ``single`` model judges). ``calibrators`` and ``threshold`` default to the shipped ones;
    ``recalibration``: a compile's refit on its validation answers (:func:`recalibrate`).
    """
    if not sql:
        return Assessment(None, True)
    models = calibrators or packaged_calibrators()
    cut = packaged_threshold() if threshold is None else threshold
    shape = any(k in SHAPE_FEATURES for m in models.values() for k in m.weights)
    features, readings = evidence(question, candidates, sql, db, shape=shape)
    distinct = [c for c in dict.fromkeys(candidates) if c]
    model = models["pool"] if len(distinct) > 1 or len(candidates) > 1 else models["single"]
    confidence = recalibrated(model.probability(features), recalibration)
    # the answer's own reading is no alternative; where the answer is in no class (it failed, or
    # a corrector rewrote it), the most shared reading is the first alternative
    alternatives = tuple(r for r in readings if not r.own)[:max_alternatives]
    return Assessment(confidence, confidence < cut, features, alternatives)


#: The likelihood given to an answer with no SQL (rule 34): below any answer scored there.
NO_SQL_LOGPROB = -5.0


def likelihood(question: str, sql: str, db: Database, lm: Any, evidence: str = "") -> float:
    """How probable ``lm`` finds ``sql`` as its reply to the question: the mean natural-log
    probability per token of ``sql`` after the prompt ``direct``'s generator sends
    (:meth:`~sqlweave.programs.stages.generators.Prompt.messages`), ``lm_mean_logprob`` of
    docs/decisions.md, rule 34. A model's own doubt about its answer differs between answers
    whose candidate pools look the same (two greedy queries that agreed).

    Needs a local model (:func:`sqlweave.lm.scoring.score_answer` refuses a served one with a
    clear error). The prompt starts with the schema, so questions on one database share the
    model's cached prefix: ~1 s an answer on this CPU once it is cached."""
    from sqlweave.lm.scoring import score_answer
    from sqlweave.programs.stages.generators import build

    if not sql.strip():
        return NO_SQL_LOGPROB
    messages = build("direct").prompt(question=question, db=db, evidence=evidence).messages()
    return score_answer(lm, messages, sql).mean


def record_confidence(question: str, candidates: Sequence[str], sql: str, db: Database) -> float:
    """The confidence an evaluation record keeps (4 decimals); what :func:`sqlweave.evaluate.
    evaluate` calls as its ``judge``."""
    judged = assess(question, candidates, sql, db)
    return -1.0 if judged.confidence is None else round(judged.confidence, 4)
