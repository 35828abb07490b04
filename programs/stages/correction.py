"""Execution-guided self-correction: run the query, show the LM what went wrong, try again.

One loop covers the seed variants through switches: Dubo-SQL v1 (one retry on error,
``max_rounds=1``), Dubo-SQL v2 (a loop), SEA-SQL (``reflect``: a separate call explains the error
before each correction; history carried, up to 10 rounds) and RSL-SQL (``retry_on_empty``: an
empty result is treated as a failure; ``multi_turn`` dialogue). A query that runs costs no call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from sqlweave.db import Database
from sqlweave.programs.base import resolve_database
from sqlweave.programs.stages.feedback import FEEDBACK_TIMEOUT_S, describe_execution, is_empty
from sqlweave.schema import introspect, render_ddl
from sqlweave.signatures import CorrectSQL, ReflectOnError
from sqlweave.sqltext import extract_sql

logger = logging.getLogger(__name__)


def format_attempts(history: list[dict[str, Any]], current: str) -> str:
    """Feedback text: the current outcome, then the earlier attempts and how each went wrong.

    Showing earlier attempts (multi-turn) keeps a small model from proposing a query it already
    tried.
    """
    parts = [f"Outcome of this query: {current}"]
    earlier = history[:-1]
    if earlier:
        parts.append("Earlier attempts that also failed:")
        for i, item in enumerate(earlier, 1):
            lines = [f"{i}. SQL: {item['sql'] or '(none)'}", f"   Outcome: {item['feedback']}"]
            if item.get("reason"):
                lines.append(f"   Cause: {item['reason']}")
            parts.append("\n".join(lines))
    return "\n".join(parts)


@dataclass(eq=False, repr=False)  # a module keeps identity equality and DSPy's repr
class CorrectionLoop(dspy.Module):
    """Execute, and while the query fails, ask the LM to fix it (at most ``max_rounds`` times).

    * ``retry_on_empty``: an empty result (no rows or only NULLs) counts as a failure too;
    * ``reflect``: a :class:`~sqlweave.signatures.ReflectOnError` call states the cause before
      each :class:`~sqlweave.signatures.CorrectSQL` call (2 calls per round instead of 1);
    * ``multi_turn``: the feedback lists every earlier attempt and its error, not only the last;
    * ``schema_hints``: an unknown table or column's error is followed by where the schema has
      it and the keys that join it (:func:`~sqlweave.programs.stages.feedback.schema_hint`): the 1.5B
      model shown the bare error mostly returns the query unchanged.

    When no attempt succeeds the result is the last attempt that at least ran (e.g. returned an
    empty result), else the original query: a correction that still fails is no better than it.
    """

    max_rounds: int = 3
    retry_on_empty: bool = False
    reflect: bool = False
    multi_turn: bool = True
    timeout_s: float = FEEDBACK_TIMEOUT_S
    schema_hints: bool = False

    def __post_init__(self) -> None:
        if self.max_rounds < 0:
            raise ValueError("max_rounds must be >= 0")
        self.correct = dspy.Predict(CorrectSQL)
        if self.reflect:
            self.reflector = dspy.Predict(ReflectOnError)

    def _acceptable(self, result: Any) -> bool:
        return result is not None and not (self.retry_on_empty and is_empty(result))

    def forward(
        self,
        sql: str,
        db: Database | str | Path,
        question: str,
        evidence: str = "",
        db_schema: str | None = None,
    ) -> dspy.Prediction:
        """Returns ``Prediction(sql, rounds, history, result)``.

        ``rounds`` counts correction rounds (0 when the input already ran); ``history`` holds
        every executed attempt in order as ``{"sql", "feedback"[, "reason"]}``; ``result`` is the
        :class:`~sqlweave.db.QueryResult` of the returned SQL, or None when it does not run.
        ``db_schema`` is the schema text shown to the LM (default: the full DDL).
        """
        database = resolve_database(db)
        schema_text = db_schema if db_schema is not None else render_ddl(introspect(database))
        history: list[dict[str, Any]] = []
        best_ran: tuple[str, Any] | None = None
        current = sql
        rounds = 0
        while True:
            result, text = describe_execution(
                database, current, timeout_s=self.timeout_s, hints=self.schema_hints
            )
            history.append({"sql": current, "feedback": text})
            if result is not None:
                best_ran = (current, result)
            if self._acceptable(result):
                return dspy.Prediction(sql=current, rounds=rounds, history=history, result=result)
            if rounds >= self.max_rounds:
                break
            rounds += 1
            feedback = format_attempts(history, text) if self.multi_turn else text
            common = {
                "dialect": database.dialect,
                "db_schema": schema_text,
                "question": question,
                "sql": current,
                "feedback": feedback,
            }
            if self.reflect:
                reason = self._reason(common)
                history[-1]["reason"] = reason
                feedback += f"\nLikely cause: {reason}"
                common["feedback"] = feedback
            current = self._fix(common, evidence)
            logger.debug("correction round %d -> %s", rounds, current[:200])

        if best_ran is not None:
            final, result = best_ran
        else:
            final, result = sql, None
        return dspy.Prediction(sql=final, rounds=rounds, history=history, result=result)

    def _reason(self, common: dict[str, str]) -> str:
        try:
            return str(self.reflector(**common).reason or "").strip()
        except AdapterParseError as err:
            return (err.lm_response or "").strip()

    def _fix(self, common: dict[str, str], evidence: str) -> str:
        try:
            raw = self.correct(**common, evidence=evidence or "").corrected_sql
        except AdapterParseError as err:
            # A small model that ignores the output format still often wrote a query: keep it.
            raw = err.lm_response or ""
        return extract_sql(raw)


# --- the other correctors (the role's protocol: sqlweave.programs.stages) -------------------------


class NoCorrector(dspy.Module):
    """The ``none`` corrector: the SQL is returned unchanged, unexecuted."""

    is_noop = True

    def forward(self, sql: str, **_: Any) -> dspy.Prediction:
        return dspy.Prediction(sql=sql, rounds=0, history=[], result=None)


class RuleCorrector(dspy.Module):
    """The ``rules`` corrector: MageSQL's rule-based correction (:mod:`sqlweave.programs.stages.rules`),
    no LM call. ``history`` holds one entry naming the rules that fired (none when nothing
    changed); stored values feed the string-format rule only when the SQL has literals.
    """

    def forward(
        self, sql: str, db: Database | str | Path, question: str = "", **_: Any
    ) -> dspy.Prediction:
        import re

        from sqlweave.programs.stages.rules import apply_rules
        from sqlweave.values import ValueIndex

        database = resolve_database(db)
        if not sql:
            return dspy.Prediction(sql=sql, rounds=0, history=[], fired=[])
        values = ValueIndex.build(database) if re.search(r"['\"]", sql) else None
        fixed = apply_rules(sql, database, dialect=database.dialect, value_index=values)
        history = []
        if fixed.fired:
            history = [{"sql": sql, "feedback": "rules: " + ", ".join(fixed.fired)}]
        return dspy.Prediction(
            sql=fixed.sql, rounds=int(bool(fixed.fired)), history=history, fired=list(fixed.fired)
        )
