""" "Both X and Y" written as an INTERSECT: a rewrite of the selected answer, no LM call.

The 1.5B model reads "the customers who have both 'On Road' and 'Shipped' orders" as
``WHERE order_status IN ('On Road', 'Shipped')``: the customers with *either* status. On
``spider-train-select`` (1,600 Spider train questions, ``direct`` × 8 with the join repair) that
misreading is the answer of 11 of the 39 questions that say "both", and all 11 are wrong; none of
the questions answered right carries it. The vote cannot mend it: the samples agree on it.

:func:`both_as_intersect` rewrites it: when the question has the word "both" and a SELECT of the
answer has, among the conjuncts of its WHERE, ``col IN (v1, v2)`` with exactly two literals, the
SELECT becomes ``<it with col = v1> INTERSECT <it with col = v2>`` (the rows that hold for each
value). It is conservative: a SELECT that groups, orders or limits is left alone (a ``GROUP BY …
HAVING COUNT(DISTINCT col) = 2`` already says "both", and SQLite takes no ORDER BY inside a
compound's arm), as is a list under an ``OR`` or a ``NOT``. :class:`IntersectRewrite` (the
``intersect`` corrector; ``rules+intersect``, alias ``rules_intersect``, runs MageSQL's rules
first) keeps the rewrite only if it runs and returns a row: "the ages of both Alice and Bob" asks for a list, and its INTERSECT
usually comes back empty (not when the two share an age: a known miss of the check).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import dspy
from sqlglot import exp

from sqlweave.db import Database, ExecutionError
from sqlweave.programs import stages
from sqlweave.programs.base import resolve_database
from sqlweave.programs.stages.chain import Chain
from sqlweave.sqlstruct import parse

#: The chain the ``rules_intersect`` name builds (:class:`IntersectCorrector`).
STEPS = "rules+intersect"

#: The question's cue, as a whole word.
BOTH = re.compile(r"\bboth\b", re.IGNORECASE)


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    """The terms of a chain of ANDs (parentheses around the whole chain dropped)."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _two_literal_list(node: exp.Expression) -> bool:
    """``col IN (v1, v2)``: a column against a list of exactly two literals."""
    values = node.expressions if isinstance(node, exp.In) else []
    return (
        isinstance(node, exp.In)
        and node.args.get("query") is None
        and isinstance(node.this, exp.Column)
        and len(values) == 2
        and all(isinstance(v, exp.Literal) for v in values)
    )


def _rewritable(select: exp.Select) -> exp.In | None:
    """The two-value list among ``select``'s WHERE conjuncts, if ``select`` may be split.

    Not an arm of a compound that has a UNION or EXCEPT in it (SQLite chains compound operators
    left to right, so an INTERSECT put into such an arm would apply to the whole chain before
    it); an arm of INTERSECTs alone may be split, intersection being associative. Nor a SELECT
    with its own WITH (each arm would repeat it, which SQLite rejects)."""
    where = select.args.get("where")
    if where is None or any(
        select.args.get(k) for k in ("group", "order", "limit", "having", "with_")
    ):
        return None
    node = select.parent
    while isinstance(node, exp.SetOperation):
        if not isinstance(node, exp.Intersect):
            return None
        node = node.parent
    hits = [c for c in _conjuncts(where.this) if _two_literal_list(c)]
    return hits[0] if len(hits) == 1 else None


def _arm(select: exp.Select, position: int, value: exp.Expression) -> exp.Select:
    """A copy of ``select`` whose ``position``-th IN (in ``find_all`` order) is ``col = value``."""
    arm = select.copy()
    twin = list(arm.find_all(exp.In))[position]
    twin.replace(exp.EQ(this=twin.this.copy(), expression=value.copy()))
    return arm


def both_as_intersect(sql: str, question: str, dialect: str = "sqlite") -> str | None:
    """``sql`` with its "both" list split into an INTERSECT, or None when nothing applies.

    Only the outermost SELECT that qualifies is rewritten (a subquery's, if the outer one does
    not): one reading of "both" per question.
    """
    if not sql or not BOTH.search(question or ""):
        return None
    tree = parse(sql, dialect)
    if tree is None:
        return None
    tree = tree.copy()
    for select in tree.find_all(exp.Select, bfs=True):
        target = _rewritable(select)
        if target is None:
            continue
        # Found in the copies by position, the target's by identity: sqlglot nodes compare
        # by content, and the same list may also stand in the SELECT list
        # (``x IN ('p', 'q') AS f``), where it must stay.
        position = next(i for i, node in enumerate(select.find_all(exp.In)) if node is target)
        first, second = target.expressions
        both = exp.Intersect(
            this=_arm(select, position, first),
            expression=_arm(select, position, second),
            distinct=True,
        )
        if select is tree:
            return both.sql(dialect=dialect)
        select.replace(both)
        return tree.sql(dialect=dialect)
    return None


def checked_rewrite(sql: str, question: str, db: Database, timeout_s: float = 10.0) -> str | None:
    """:func:`both_as_intersect` on ``db``'s dialect, kept only if it runs and returns a row
    (what the corrector applies; ``experiments/intersect_replay.py`` replays it)."""
    rewritten = both_as_intersect(sql, question, db.dialect)
    if rewritten is None:
        return None
    rows = db.try_execute(rewritten, timeout_s=timeout_s)
    return None if isinstance(rows, ExecutionError) or not rows else rewritten


class IntersectRewrite(dspy.Module):
    """The ``intersect`` corrector: :func:`checked_rewrite` alone (no LM call); chained after
    MageSQL's rules it is ``rules+intersect`` (:class:`IntersectCorrector`)."""

    def __init__(self, timeout_s: float = 10.0) -> None:
        super().__init__()
        self.timeout_s = timeout_s

    def forward(
        self, sql: str, db: Database | str | Path, question: str = "", **_: Any
    ) -> dspy.Prediction:
        rewritten = checked_rewrite(sql, question, resolve_database(db), self.timeout_s)
        if rewritten is None:
            return dspy.Prediction(sql=sql, rounds=0, history=[], fired=[])
        step = {"sql": sql, "feedback": 'intersect: "both" read as each value'}
        return dspy.Prediction(sql=rewritten, rounds=1, history=[step], fired=["both_as_intersect"])


class IntersectCorrector(Chain):
    """The ``rules_intersect`` corrector: the chain ``rules+intersect`` under its recorded name
    (MageSQL's rules, then :func:`checked_rewrite`). No LM call."""

    def __init__(self, timeout_s: float = 10.0) -> None:
        settings = {"intersect": {"timeout_s": timeout_s}}
        super().__init__(stages.chain_steps(STEPS, settings=settings), spec=STEPS)
        self.timeout_s = timeout_s


__all__ = ["BOTH", "IntersectCorrector", "IntersectRewrite", "both_as_intersect", "checked_rewrite"]
