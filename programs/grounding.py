"""The ``grounded`` selector: the execution vote over candidates whose string values exist.

A candidate that asks for ``WHERE billing_state = 'Illinois'`` on a column that stores ``'IL'``
runs, returns nothing (or a zero, or a NULL) and can still win the vote: the 1.5B model guesses
such spellings the same way in several samples, and several empty answers agree with each other.
The database can tell: a value compared with ``=`` that the column stores in no spelling is
almost never what the question meant. :class:`GroundedSelector` drops every candidate that
compares a column with ``=`` to a string literal the column never stores (compared without
case, so ``'usa'`` against a stored ``'USA'`` stays: MageSQL's rules fix the case), then votes
among the rest like the ``vote`` selector; if none is left, it votes among all of them. No LM
call: one ``LIMIT 1`` lookup per distinct (table, column, value).

Decided as issue 37's rule 9 (README, "A vote over grounded candidates"): designed on
``spider-train-select``'s recorded candidates (+0.6, 14 gained and 4 lost, p 0.031), then
adopted on validation's three recorded pools (4 gained, 1 lost).

What is checked, conservatively (anything unclear counts as grounded):

* ``col = 'text'`` (either side) anywhere in the query, subqueries included; not ``IN``,
  ``LIKE`` or ``<>``;
* a qualified column's table is read from the query's aliases (``T2.x``: the table ``T2``
  names; when two scopes reuse an alias, the last one); an unqualified column is checked only
  when the query reads a single table;
* a lookup that fails (no such column, a type the database cannot lower-case, a timeout)
  leaves the candidate in.

It needs every candidate, so a sampler feeding it draws them all: the settled-vote early stop
(:func:`~sqlweave.programs.voting.settle_for`) is kept for the plain ``vote`` selector only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import dspy
from sqlglot import exp

from sqlweave.db import Database, ExecutionError
from sqlweave.programs.base import resolve_database
from sqlweave.programs.feedback import FEEDBACK_TIMEOUT_S
from sqlweave.programs.voting import Candidates, VoteSelector
from sqlweave.sqlstruct import parse

#: Seconds for one value lookup; a lookup that takes longer counts as grounded.
LOOKUP_TIMEOUT_S = 5.0


def string_comparisons(tree: exp.Expression) -> Iterator[tuple[exp.Column, str]]:
    """Every ``column = 'text'`` in ``tree`` (either operand order) as (column, text)."""
    for node in tree.find_all(exp.EQ):
        left, right = node.this, node.expression
        if isinstance(right, exp.Column) and isinstance(left, exp.Literal):
            left, right = right, left
        if isinstance(left, exp.Column) and isinstance(right, exp.Literal) and right.is_string:
            yield left, right.this


def _tables(tree: exp.Expression) -> tuple[dict[str, exp.Table], list[exp.Table]]:
    """The query's tables by alias (or name), lower-cased; the last scope to use an alias wins;
    and the distinct tables it reads."""
    by_alias: dict[str, exp.Table] = {}
    distinct: dict[str, exp.Table] = {}
    for table in tree.find_all(exp.Table):
        if not table.name:
            continue
        by_alias[table.alias_or_name.lower()] = table
        distinct.setdefault(f"{table.db}.{table.name}".lower(), table)
    return by_alias, list(distinct.values())


class ValueLookup:
    """Whether a column stores a value, in any case; remembered per (table, column, value)."""

    def __init__(self, db: Database, timeout_s: float = LOOKUP_TIMEOUT_S) -> None:
        self.db = db
        self.timeout_s = timeout_s
        self._known: dict[tuple[str, str, str], bool] = {}

    def stores(self, table: exp.Table, column: str, value: str) -> bool:
        """True when some row's ``column`` equals ``value`` ignoring case, or when the lookup
        cannot tell (it failed): only a lookup that ran and found nothing says False."""
        target = exp.Table(this=table.this.copy(), db=table.args.get("db"))
        key = (target.sql(dialect=self.db.dialect).lower(), column.lower(), value)
        if key not in self._known:
            # Qualified: SQLite reads an unknown double-quoted name alone as a string.
            lowered = exp.Lower(this=exp.column(column, table=target.name, quoted=True))
            probe = (
                exp.select("1")
                .from_(target)
                .where(exp.EQ(this=lowered, expression=exp.Lower(this=exp.Literal.string(value))))
                .limit(1)
            )
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
    case (module doc); SQL that does not parse counts as grounded."""
    tree = parse(sql, lookup.db.dialect)
    if tree is None:
        return True
    by_alias, distinct = _tables(tree)
    for column, value in string_comparisons(tree):
        if column.table:
            table = by_alias.get(column.table.lower())
        else:
            table = distinct[0] if len(distinct) == 1 else None
        if table is not None and not lookup.stores(table, column.name, value):
            return False
    return True


class GroundedSelector(VoteSelector):
    """The ``grounded`` selector: the execution vote among the candidates whose string values the
    database stores (module doc); all of them when none is. No LM call.

    Returns ``Prediction(sql, choice, lm_called, vote, kept)``: ``choice`` is 1-based in the
    candidates given; ``kept`` their 0-based positions that voted (``vote``'s indices are into
    that list).
    """

    def __init__(
        self, timeout_s: float = FEEDBACK_TIMEOUT_S, lookup_timeout_s: float = LOOKUP_TIMEOUT_S
    ) -> None:
        super().__init__(timeout_s)
        self.lookup_timeout_s = lookup_timeout_s

    def forward(  # type: ignore[override]
        self,
        candidates: Sequence[str],
        db: Database | str | Path,
        question: str = "",
        evidence: str = "",
        db_schema: str | None = None,
        weights: Sequence[float] | None = None,
    ) -> dspy.Prediction:
        if not candidates:
            raise ValueError("a selector needs at least one candidate")
        database = resolve_database(db)
        lookup = ValueLookup(database, self.lookup_timeout_s)
        kept = [i for i, sql in enumerate(candidates) if is_grounded(sql, lookup)]
        if not kept:
            kept = list(range(len(candidates)))
        sqls = [candidates[i] for i in kept]
        if isinstance(candidates, Candidates):
            sqls = Candidates(sqls, candidates.outcomes)
        voted = super().forward(
            sqls,
            database,
            question,
            evidence,
            db_schema,
            None if weights is None else [weights[i] for i in kept],
        )
        index = kept[voted.choice - 1]
        return dspy.Prediction(
            sql=candidates[index], choice=index + 1, lm_called=False, vote=voted.vote, kept=kept
        )
