"""Join completion: a query that names a column of a table it never joined gets the join.

The commonest way a small model's SQL fails to run is a column taken from the wrong table:
``hero_power.power_name`` where ``power_name`` lives in ``superpower``, one foreign key away, or
``WHERE attribute_name = 'Speed'`` on ``superhero``, two keys away. On the recorded candidates of
the ``ensemble`` program (Qwen2.5-Coder-1.5B) that is 215 of the 335 distinct failing queries on
bird-52 and 382 of 537 on spider-dev-200: a missing join, not a missing idea. MageSQL's schema
rule maps a name that exists nowhere to the closest one; this maps a name that exists, but
elsewhere, by adding the joins along the shortest foreign-key path (at most ``max_hops``; the
keys its names imply where a schema declares none: :func:`keys_of`) from
the table it was asked of (or from the query's tables, for an unqualified name) and pointing the
column at the joined table. No LM call.

It only ever touches queries that do not run as written (a column no source of its SELECT has),
so it cannot break a query that ran; whether the completed query is *right* is left to the vote
it joins. Used by the ``joins`` corrector (:class:`JoinCorrector`), e.g. as the ``ensemble``
program's ``repair`` of failing candidates.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections import deque
from pathlib import Path
from typing import Any

import dspy
from sqlglot import exp

from sqlweave.db import Database
from sqlweave.programs.base import resolve_database
from sqlweave.programs.stages.resolution import (
    Resolver,
    enclosing_selects,
    inside_select_body,
    is_sqlite_string,
    sources_of,
)
from sqlweave.schema import ForeignKey, Schema, Table, introspect
from sqlweave.sqltree import parse_sql

logger = logging.getLogger(__name__)

#: Longest foreign-key path a completion adds: two hops reach a lookup table through a link
#: table (superhero -> hero_attribute -> attribute); longer paths guess more than they know.
MAX_HOPS = 2


Step = tuple[str, str, str, str]


def _words(text: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", text.lower()) if len(w) > 2}


def keys_of(schema: Schema) -> list[ForeignKey]:
    """The schema's foreign keys; for a schema that declares none (a copy made without its
    constraints, many a user's database), the keys its names imply. A table's key is its
    one-column primary key, else a column named ``<table>_id``; another table's column of the
    same name refers to it (``singer_in_concert.singer_id`` -> ``singer.singer_id``), or, for a
    key named ``id``, a column named ``<table>_id`` (``hero_power.hero_id`` does not name
    ``superhero``: no link)."""
    if schema.foreign_keys:
        return list(schema.foreign_keys)
    implied = []
    for target in schema.tables:
        own = f"{target.name.lower()}_id"
        if len(target.primary_key) == 1:
            key = target.primary_key[0]
        else:
            key = next((c for c in target.column_names if c.lower() == own), "")
        if not key:
            continue
        refers = own if key.lower() == "id" else key.lower()
        for table in schema.tables:
            if table is target:
                continue
            for column in table.column_names:
                if column.lower() == refers:
                    implied.append(ForeignKey(table.name, column, target.name, key))
    return implied


def _links(keys: list[ForeignKey], table: str, words: set[str]) -> dict[str, Step | None]:
    """Each table one foreign key from ``table``, with the key's step; None where several keys
    link the pair (``eye_colour_id``, ``hair_colour_id`` -> ``colour``) and the question's
    words pick none of them out (or more than one)."""
    found: dict[str, list[Step]] = {}
    for fk in keys:
        if fk.table.lower() == table:
            step = (fk.table, fk.column, fk.ref_table, fk.ref_column)
        elif fk.ref_table.lower() == table:
            step = (fk.ref_table, fk.ref_column, fk.table, fk.column)
        else:
            continue
        found.setdefault(step[2].lower(), []).append(step)
    links: dict[str, Step | None] = {}
    for other, steps in found.items():
        if len(steps) > 1:
            named = [s for s in steps if any(w[:3] in words for w in _words(s[1] + " " + s[3]))]
            steps = named if len(named) == 1 else []
        links[other] = steps[0] if steps else None
    return links


def fk_path(
    schema: Schema,
    starts: list[str],
    goals: list[str],
    max_hops: int = MAX_HOPS,
    question: str = "",
) -> tuple[str, list[Step]] | None:
    """``(start table, steps)`` of the shortest foreign-key path from one of ``starts`` to one of
    ``goals``, each step ``(from table, from column, to table, to column)``; None when no path
    of at most ``max_hops`` exists, or the shortest needs a key that several keys between the
    same two tables make a guess (unless a word of ``question`` names one: "blue *eyes*" picks
    ``eye_colour_id``). Ties go to the earlier start and the schema's key order."""
    goal = {g.lower() for g in goals}
    words = {w[:3] for w in _words(question)}
    frontier: deque[tuple[str, str, list[Step]]] = deque((s, s.lower(), []) for s in starts)
    seen = {s.lower() for s in starts}
    keys = keys_of(schema)  # once: a schema without declared keys derives them
    while frontier:
        start, table, steps = frontier.popleft()
        if len(steps) >= max_hops:
            continue
        for other, step in _links(keys, table, words).items():
            if other in seen:
                continue
            seen.add(other)
            if step is None:
                continue  # an ambiguous key: no path through it
            if other in goal:
                return start, [*steps, step]
            frontier.append((start, other, [*steps, step]))
    return None


def _alias_of(select: exp.Select, table: str) -> str | None:
    """The alias (or name) under which ``select`` already reads ``table``, if it does."""
    for source in sources_of(select).values():
        if isinstance(source, exp.Table) and source.name.lower() == table.lower():
            return source.alias_or_name
    return None


def complete_joins(
    sql: str, schema: Schema, dialect: str = "sqlite", question: str = ""
) -> str | None:
    """``sql`` with the joins its stray columns need (module doc), or None when nothing was
    changed (it parses not, every column resolves, or no short path reaches the column);
    ``question`` chooses between several keys linking the same two tables (:func:`fk_path`)."""
    tree = parse_sql(sql, dialect)
    if tree is None:
        return None
    resolver = Resolver(tree, schema)
    fresh = itertools.count(1)
    changed = False
    for col in list(tree.find_all(exp.Column)):
        if isinstance(col.this, exp.Star) or not inside_select_body(col) or resolver.known(col):
            continue
        if col.find_ancestor(exp.Join) is not None:
            continue  # a join's own key on the wrong table: a wrong join, not a missing one
        if is_sqlite_string(col, resolver, dialect):
            continue  # a "value" SQLite reads as a string, as the rules leave it
        select = next(enclosing_selects(col))
        if resolver.opaque(select):
            continue  # a subquery or CTE source may hold the name
        sources = sources_of(select)
        qualifier = col.table.lower()
        if qualifier:
            if qualifier not in sources:
                continue
            start_table = resolver.table_of(sources[qualifier])
            starts: list[Table] = [start_table] if start_table is not None else []
        else:
            starts = resolver.source_tables(select)
        holders = [t.name for t in schema.tables if t.column(col.name) is not None]
        if any(_alias_of(select, holder) for holder in holders):
            continue  # a table the query reads has it: the wrong alias (MageSQL's schema rule)
        found = None
        if starts and holders:
            found = fk_path(schema, [t.name for t in starts], holders, question=question)
        if found is None:
            continue
        start, steps = found
        alias = sources[qualifier].alias_or_name if qualifier else _alias_of(select, start)
        for _, from_col, to_table, to_col in steps:
            known = _alias_of(select, to_table)
            if known is None:
                taken = {key.lower() for key in sources_of(select)}
                known = next(f"J{n}" for n in fresh if f"j{n}" not in taken)
                select.join(
                    exp.alias_(exp.to_table(to_table), known, table=True),
                    on=exp.EQ(
                        this=exp.column(from_col, table=alias),
                        expression=exp.column(to_col, table=known),
                    ),
                    join_type="inner",
                    copy=False,
                )
            alias = known
        holder = schema.find_table(steps[-1][2])
        real = holder.column(col.name) if holder is not None else None
        logger.debug("joins: %s -> %s.%s", col.sql(), alias, col.name)
        col.replace(exp.column(real.name if real is not None else col.name, table=alias))
        resolver = Resolver(tree, schema)
        changed = True
    return tree.sql(dialect=dialect) if changed else None


class JoinCorrector(dspy.Module):
    """The ``joins`` corrector: :func:`complete_joins` (no LM call). ``history`` holds one entry
    when a join was added; the query is returned unchanged otherwise."""

    def forward(
        self, sql: str, db: Database | str | Path, question: str = "", **_: Any
    ) -> dspy.Prediction:
        database = resolve_database(db)
        schema = introspect(database)
        fixed = complete_joins(sql, schema, database.dialect, question) if sql else None
        if fixed is None:
            return dspy.Prediction(sql=sql, rounds=0, history=[])
        history = [{"sql": sql, "feedback": "joins: completed the joins of stray columns"}]
        return dspy.Prediction(sql=fixed, rounds=1, history=history)


__all__ = ["MAX_HOPS", "JoinCorrector", "Step", "complete_joins", "fk_path", "keys_of"]
