"""The ``grounded`` selector: the execution vote over candidates whose string values exist.

A candidate that asks for ``WHERE billing_state = 'Illinois'`` on a column that stores ``'IL'``
runs, returns nothing (or a zero, or a NULL) and can still win the vote: the 1.5B model guesses
such spellings the same way in several samples, and several empty answers agree with each other.
The database can tell: a value compared with ``=`` that the column stores in no spelling is
almost never what the question meant. :class:`GroundedSelector` drops every candidate that
compares a column with ``=`` to a string literal the column never stores (compared as the
database compares it, and also without case, so ``'usa'`` against a stored ``'USA'`` stays:
MageSQL's rules fix the case), then votes among the rest like the ``vote`` selector. If none
is left, or none of those left runs, it is the plain vote over all of them. No LM call: one
``LIMIT 1`` lookup per distinct (table, column, value).

Decided as issue 37's rule 9 (README, "A vote over grounded candidates"): designed on
``spider-train-select``'s recorded candidates, adopted on validation's three recorded pools
(``experiments/grounded_replay.py`` and docs/results.md hold the figures).

What is checked, conservatively (anything unclear counts as grounded):

* ``col = 'text'`` (either side) in any query scope: the main query, a subquery, each arm of a
  UNION / INTERSECT / EXCEPT; not ``IN``, ``LIKE`` or ``<>``;
* the column's table is read from its own scope (sqlglot's scopes): a qualified column's
  alias, or the scope's one source when unqualified; a column whose source is a CTE or a
  derived table is not checked (the CTE's own body is, as a scope of its own), nor is an
  unqualified column among several sources;
* a lookup that fails (no such column, a timeout) and SQL that does not parse leave the
  candidate in: the vote deals with broken SQL.

It needs every candidate, so a sampler feeding it draws them all: the settled-vote early stop
(:func:`~sqlweave.programs.stages.sampling.settle_for`) is kept for the plain ``vote`` selector only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import dspy
from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from sqlweave.db import Database, ExecutionError
from sqlweave.programs.base import resolve_database
from sqlweave.programs.stages.feedback import FEEDBACK_TIMEOUT_S
from sqlweave.programs.stages.voting import Candidates, VoteSelector
from sqlweave.sqlstruct import parse

#: Seconds for one value lookup; a lookup that takes longer counts as grounded.
LOOKUP_TIMEOUT_S = 5.0


def _source_table(column: exp.Column, scope: Scope) -> exp.Table | None:
    """The stored table ``column`` reads in ``scope``: its qualifier's source, or the scope's one
    source when unqualified; None for a derived table, a CTE or anything ambiguous."""
    if column.table:
        source = scope.sources.get(column.table)
        if source is None:  # an alias written in another case than its definition
            wanted = column.table.lower()
            source = next((s for a, s in scope.sources.items() if a.lower() == wanted), None)
    else:
        source = next(iter(scope.sources.values())) if len(scope.sources) == 1 else None
    return source if isinstance(source, exp.Table) and source.name else None


def grounding_checks(tree: exp.Expression) -> Iterator[tuple[exp.Table, exp.Column, str]]:
    """(table, column, text) for every ``column = 'text'`` whose stored table its query scope
    (the main query, a subquery, a CTE's body, a compound's arm) names unambiguously; a column
    read from a CTE or a derived table is not checked."""
    for scope in traverse_scope(tree):
        for column in scope.columns:
            comparison = column.parent
            if not isinstance(comparison, exp.EQ):
                continue
            other = comparison.expression if comparison.this is column else comparison.this
            if not (isinstance(other, exp.Literal) and other.is_string):
                continue
            table = _source_table(column, scope)
            if table is not None:
                yield table, column, other.this


class ValueLookup:
    """Whether a column stores a value (as the database compares it, or in another case);
    remembered per (table, column, value)."""

    def __init__(self, db: Database, timeout_s: float = LOOKUP_TIMEOUT_S) -> None:
        self.db = db
        self.timeout_s = timeout_s
        self._known: dict[tuple[str, str, str], bool] = {}

    def stores(self, table: exp.Table, column: exp.Column, value: str) -> bool:
        """True when some row's ``column`` equals ``value`` (``=`` as the database reads it, so
        ``price = '5'`` matches a stored 5.0 in SQLite) or equals it ignoring case, or when the
        lookup cannot tell (it failed): only a lookup that ran and found nothing says False.
        The candidate's own identifiers are reused, so their quoting (and case) is kept."""
        target = exp.Table(this=table.this.copy())
        if table.args.get("db") is not None:
            target.set("db", table.args["db"].copy())
        key = (target.sql(dialect=self.db.dialect), column.name, value)
        if key not in self._known:
            # Qualified: SQLite reads an unknown double-quoted name alone as a string.
            ref = exp.Column(this=column.this.copy(), table=table.this.copy())
            text = exp.Literal.string(value)
            match = exp.or_(
                exp.EQ(this=ref, expression=text),
                exp.EQ(this=exp.Lower(this=ref.copy()), expression=exp.Lower(this=text.copy())),
            )
            probe = exp.select("1").from_(target).where(match).limit(1)
            try:
                result = self.db.execute(
                    probe.sql(dialect=self.db.dialect), timeout_s=self.timeout_s, max_rows=1
                )
                self._known[key] = bool(result.rows)
            except ExecutionError:
                self._known[key] = True
        return self._known[key]


def is_grounded(sql: str, lookup: ValueLookup) -> bool:
    """False only when ``sql`` compares a column with ``=`` to a string that column stores in no
    case (module doc). SQL that does not parse, or whose scopes cannot be read, counts as
    grounded: the vote, not this check, deals with broken SQL."""
    try:
        tree = parse(sql, lookup.db.dialect)
        checks = [] if tree is None else list(grounding_checks(tree.copy()))
    except Exception:  # noqa: BLE001 - sqlglot on odd SQL (deep nesting, OptimizeError)
        return True
    return all(lookup.stores(table, column, value) for table, column, value in checks)


class GroundedSelector(VoteSelector):
    """The ``grounded`` selector: the execution vote among the candidates whose string values the
    database stores (module doc); all of them when none is. No LM call.

    Returns ``Prediction(sql, choice, lm_called, vote, kept)``: ``choice`` is 1-based in the
    candidates given; ``kept`` their 0-based positions that voted (``vote``'s indices are into
    that list).
    """

    settles_early = False  # the vote among the grounded ones is not the plain vote

    def __init__(
        self, timeout_s: float = FEEDBACK_TIMEOUT_S, lookup_timeout_s: float = LOOKUP_TIMEOUT_S
    ) -> None:
        super().__init__(timeout_s)
        self.lookup_timeout_s = lookup_timeout_s

    def forward(  # type: ignore[override]
        self,
        candidates: Sequence[str],
        db: Database | str | Path,
        weights: Sequence[float] | None = None,
        **_: Any,
    ) -> dspy.Prediction:
        """The vote among the grounded candidates (the selector protocol; the question, evidence
        and schema are accepted and not read)."""
        if not candidates:
            raise ValueError("a selector needs at least one candidate")
        database = resolve_database(db)
        lookup = ValueLookup(database, self.lookup_timeout_s)
        if weights is not None and len(weights) != len(candidates):
            raise ValueError(f"{len(weights)} weights for {len(candidates)} candidates")
        kept = [i for i, sql in enumerate(candidates) if is_grounded(sql, lookup)]
        if kept and len(kept) < len(candidates):
            narrowed = self._vote(candidates, kept, database, weights)
            if narrowed.vote.groups:  # some kept candidate ran: the narrowed vote stands
                return narrowed
        # Nothing dropped, nothing left, or nothing kept that runs (broken SQL is never judged
        # here, so it stays): the plain vote over every candidate.
        return self._vote(candidates, list(range(len(candidates))), database, weights)

    def _vote(
        self,
        candidates: Sequence[str],
        kept: list[int],
        database: Database,
        weights: Sequence[float] | None,
    ) -> dspy.Prediction:
        """The vote among ``candidates[kept]``, its choice mapped back to ``candidates``."""
        sqls = [candidates[i] for i in kept]
        if isinstance(candidates, Candidates):
            sqls = Candidates(sqls, candidates.outcomes)
        voted = super().forward(
            sqls, database, weights=None if weights is None else [weights[i] for i in kept]
        )
        index = kept[voted.choice - 1]
        return dspy.Prediction(
            sql=candidates[index], choice=index + 1, lm_called=False, vote=voted.vote, kept=kept
        )
