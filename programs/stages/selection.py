"""LM selection among executed candidates (RSL-SQL's binary selection, generalised to k).

The LM sees each candidate with what it returned, which is the point: two plausible queries are
told apart by their answers. Candidates that fail are never shown (they cannot be right), and
candidates with equivalent results are shown once, so when every candidate that runs agrees no
call is made at all.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from sqlweave.db import Database, QueryResult
from sqlweave.metrics import has_top_level_order_by
from sqlweave.programs.base import resolve_database
from sqlweave.programs.stages.feedback import FEEDBACK_TIMEOUT_S, describe_execution
from sqlweave.programs.stages.voting import equivalent
from sqlweave.schema import introspect, render_ddl
from sqlweave.signatures import SelectCandidate

logger = logging.getLogger(__name__)

_INT = re.compile(r"\d+")


def render_candidates(sqls: Sequence[str], outcomes: Sequence[str]) -> str:
    """Numbered candidates, each with its SQL and its execution summary, for the selection prompt."""
    blocks = []
    for i, (sql, outcome) in enumerate(zip(sqls, outcomes, strict=True), 1):
        blocks.append(f"Candidate {i}:\nSQL: {sql}\nResult: {outcome}")
    return "\n\n".join(blocks)


def parse_choice(value: Any, k: int) -> int | None:
    """A 1-based choice in ``1..k`` from an int, or the first number in text; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 1 <= value <= k else None
    for match in _INT.finditer(str(value or "")):
        number = int(match.group(0))
        if 1 <= number <= k:
            return number
    return None


class CandidateSelector(dspy.Module):
    """Execute candidates, merge equivalent ones, and let the LM pick among distinct answers.

    No LM call when at most one distinct answer ran. An unusable choice (garbage, out of range)
    falls back to the first candidate that ran; when none ran, the first candidate is returned.
    """

    def __init__(self, max_rows: int = 5, timeout_s: float = FEEDBACK_TIMEOUT_S) -> None:
        super().__init__()
        self.max_rows = max_rows
        self.timeout_s = timeout_s
        self.select = dspy.Predict(SelectCandidate)

    def forward(
        self,
        candidates: Sequence[str],
        db: Database | str | Path,
        question: str,
        evidence: str = "",
        db_schema: str | None = None,
    ) -> dspy.Prediction:
        """Returns ``Prediction(sql, choice, candidates, results, feedback, shown, lm_called)``.

        ``choice`` is the 1-based position of the returned SQL in ``candidates``; ``results``
        and ``feedback`` give each candidate's :class:`QueryResult` (None on failure) and summary;
        ``shown`` lists the 0-based candidates the LM saw (one per distinct answer).
        """
        if not candidates:
            raise ValueError("CandidateSelector needs at least one candidate")
        database = resolve_database(db)
        cands = list(candidates)
        results: list[QueryResult | None] = []
        feedback: list[str] = []
        for sql in cands:
            result, text = describe_execution(
                database, sql, max_rows=self.max_rows, timeout_s=self.timeout_s
            )
            results.append(result)
            feedback.append(text)

        shown = self._distinct(cands, results, database.dialect)

        def done(index: int, lm_called: bool) -> dspy.Prediction:
            return dspy.Prediction(
                sql=cands[index],
                choice=index + 1,
                candidates=cands,
                results=results,
                feedback=feedback,
                shown=shown,
                lm_called=lm_called,
            )

        if not shown:
            logger.debug("selection: no candidate ran; keeping the first")
            return done(0, False)
        if len(shown) == 1:
            return done(shown[0], False)

        schema_text = db_schema if db_schema is not None else render_ddl(introspect(database))
        options = render_candidates([cands[i] for i in shown], [feedback[i] for i in shown])
        try:
            raw: Any = self.select(
                dialect=database.dialect,
                db_schema=schema_text,
                question=question,
                evidence=evidence or "",
                candidates=options,
            ).choice
        except AdapterParseError as err:
            raw = err.lm_response or ""
        picked = parse_choice(raw, len(shown))
        if picked is None:
            logger.warning("selection: unusable choice %r; taking the first that ran", raw)
            return done(shown[0], True)
        return done(shown[picked - 1], True)

    @staticmethod
    def _distinct(cands: list[str], results: list[QueryResult | None], dialect: str) -> list[int]:
        """Indices of the first candidate of each class of equivalent results, in input order."""
        reps: list[tuple[int, bool]] = []
        for i, result in enumerate(results):
            if result is None:
                continue
            ordered = has_top_level_order_by(cands[i], dialect)
            same = any(
                equivalent(results[j], result, ordered=ordered and rep_ordered)  # type: ignore[arg-type]
                for j, rep_ordered in reps
            )
            if not same:
                reps.append((i, ordered))
        return [i for i, _ in reps]


class RunoffSelector(dspy.Module):
    """The ``runoff`` selector: the execution vote, and when it is close, the LM decides between
    the two leading answers (CHASE-SQL's pairwise comparison, RSL-SQL's binary selection with
    results shown).

    The vote (:func:`~sqlweave.programs.stages.voting.vote`, ``weights`` per candidate when given)
    ranks the classes of equivalent results. When the runner-up holds at least ``threshold`` of
    the leader's weight, one representative of each is shown to the LM with what it returned
    (:class:`CandidateSelector`), leader first; otherwise the vote stands and no call is made.
    ``threshold=1`` asks only on exact ties; 0 asks whenever two answers ran.

    It needs every candidate, so a :class:`~sqlweave.programs.stages.sampling.Sampler` feeding it must
    not stop early on a settled vote (:func:`~sqlweave.programs.stages.sampling.settle_for` gives it no
    ``settle``): a vote that cannot change can still be close.
    """

    takes_weights = True

    def __init__(
        self, threshold: float = 0.5, max_rows: int = 5, timeout_s: float = FEEDBACK_TIMEOUT_S
    ) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be within [0, 1], got {threshold!r}")
        super().__init__()
        self.threshold = threshold
        self.timeout_s = timeout_s
        self.judge = CandidateSelector(max_rows=max_rows, timeout_s=timeout_s)

    def forward(
        self,
        candidates: Sequence[str],
        db: Database | str | Path,
        question: str = "",
        evidence: str = "",
        db_schema: str | None = None,
        weights: Sequence[float] | None = None,
    ) -> dspy.Prediction:
        """Returns ``Prediction(sql, choice, lm_called, vote, runoff)``; ``runoff`` holds the two
        0-based candidates the LM saw (None when the vote stood)."""
        from sqlweave.programs.stages.voting import Candidates, ranked_groups, vote

        if not candidates:
            raise ValueError("a selector needs at least one candidate")
        database = resolve_database(db)
        cands = list(candidates)
        known = candidates.outcomes if isinstance(candidates, Candidates) else None
        result = vote(cands, database, weights, timeout_s=self.timeout_s, known=known)
        ranked = ranked_groups(result.groups)
        if len(ranked) < 2 or ranked[1].weight < self.threshold * ranked[0].weight:
            return dspy.Prediction(
                sql=result.sql,
                choice=result.winner_index + 1,
                lm_called=False,
                vote=result,
                runoff=None,
            )
        pair = [ranked[0].first, ranked[1].first]
        picked = self.judge(
            candidates=[cands[i] for i in pair],
            db=database,
            question=question,
            evidence=evidence,
            db_schema=db_schema,
        )
        index = pair[picked.choice - 1]
        return dspy.Prediction(
            sql=cands[index], choice=index + 1, lm_called=picked.lm_called, vote=result, runoff=pair
        )
