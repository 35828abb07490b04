"""The SQL templates of data synthesis: each fills itself from one schema's tables, keys, typed
columns and *stored* values, drawn with a seeded RNG (step 1 of :mod:`sqlweave.synthesis.pairs`).

A template is ``(name, level, fill)``: ``fill`` takes a :class:`Draw` and returns the SQL and its
meaning in plain words, or None when this schema has nothing to fill it with. No LM call, no
gold question: what is kept is decided by :mod:`sqlweave.synthesis.drafts`.

Each template is one row of :data:`_TABLE`: the steps that draw its parts, in order, and two
format strings over those parts, its SQL and its meaning (``{t}`` writes a drawn name as SQL,
``{t:w}`` as words). What every template does alike (draw, give up on a miss, format) is written
once, in :class:`_Fill` and the shared steps, so a row says only what is its own. The steps make
their RNG calls in the order a seed has always drawn them: a seed draws the same queries.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlweave.schema import Column, Schema, Table, ident

# --- what a template sees ---------------------------------------------------------------------


@dataclass(frozen=True)
class Join:
    """``child.fk = parent.pk``: one foreign key, the only way templates join tables."""

    child: Table
    fk: str
    parent: Table
    pk: str


class Draw:
    """The schema as templates see it: typed columns and stored values, drawn with one RNG."""

    def __init__(self, schema: Schema, rng: random.Random) -> None:
        self.schema = schema
        self.dialect = schema.dialect  # how the SQL writes its names (:func:`ident`)
        self.rng = rng
        self.tables = [t for t in schema.tables if t.sample_rows]
        by_name = {t.name: t for t in schema.tables}
        self.joins = [
            Join(by_name[fk.table], fk.column, by_name[fk.ref_table], fk.ref_column)
            for fk in schema.foreign_keys
            if fk.table in by_name
            and fk.ref_table in by_name
            and fk.table != fk.ref_table
            and by_name[fk.table].sample_rows
            and by_name[fk.ref_table].sample_rows
        ]

    def table(self) -> Table | None:
        return self.rng.choice(self.tables) if self.tables else None

    def join(self) -> Join | None:
        return self.rng.choice(self.joins) if self.joins else None

    def column(self, table: Table, kind: str | None = None, *, keys: bool = False) -> Column | None:
        """A column of ``kind`` (``text``/``number``; any when None); keys only when ``keys``."""
        keyish = set(table.primary_key)
        cols = [
            c
            for c in table.columns
            if (kind is None or c.kind == kind)
            and (keys or (c.name not in keyish and not _looks_like_key(c.name)))
        ]
        return self.rng.choice(cols) if cols else None

    def joined_label(self) -> tuple[Join, Column] | None:
        """A join and a text column of its parent table (what join templates show)."""
        j = self.join()
        shown = self.column(j.parent, "text") if j else None
        return (j, shown) if j and shown else None

    def bridge(self) -> tuple[Join, Join] | None:
        """Two keys of one link table to two other tables (``singer_in_concert`` to ``singer``
        and ``concert``): the many-to-many path Spider's three-table questions walk."""
        pairs = [
            (a, b)
            for a in self.joins
            for b in self.joins
            if a.child is b.child and a.parent is not b.parent and a.fk != b.fk
        ]
        return self.rng.choice(pairs) if pairs else None

    def labelled_numbers(self) -> tuple[Table, Column, Column] | None:
        """A table with a text column to show and a number column to compare or order by."""
        t = self.table()
        if not t:
            return None
        shown, n = self.column(t, "text"), self.column(t, "number")
        return (t, shown, n) if shown and n else None

    def value(self, column: Column) -> Any | None:
        values = [v for v in column.samples if v is not None and str(v).strip()]
        return self.rng.choice(values) if values else None


def _looks_like_key(name: str) -> bool:
    low = name.lower()
    return (
        low == "id"
        or low.endswith("_id")
        or low.endswith(" id")
        or bool(re.search(r"[a-z]Id$", name))
    )


def _lit(value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _joined(j: Join, dialect: str) -> str:
    """``child AS T1 JOIN parent AS T2 ON T1.fk = T2.pk``: the one join every template writes."""
    child, parent, fk, pk = (ident(n, dialect) for n in (j.child.name, j.parent.name, j.fk, j.pk))
    return f"{child} AS T1 JOIN {parent} AS T2 ON T1.{fk} = T2.{pk}"


Filled = tuple[str, str]
"""A template's SQL and its meaning in plain words."""


def _words(name: str) -> str:
    """A table or column name as words: ``Total_Horses`` -> ``total horses``, ``ShopId`` ->
    ``shop id``. Not :func:`sqlweave.schema_filter.words`: its match tokens keep ASCII letters
    and digits only, which would show the question writer ``Nom Côté`` as ``nom c t``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return " ".join(re.sub(r"[_\-.]+", " ", spaced).split()).lower()


# --- the parts a template is filled with -------------------------------------------------------
# The meaning says in plain words what the SQL returns, built from the same drawn parts: the
# question writer paraphrases it instead of reading the SQL alone, which a 1.5B model misreads
# most on the templates whose meaning its surface hides (a HAVING read as a count, a count of
# child rows named as a count of the parents, EXCEPT read as a range).

Parts = dict[str, Any]
"""What a template's steps have drawn so far, by name: tables, columns, literals, tokens."""

Step = Callable[[Draw, Parts], "Parts | None"]
"""Draws more parts, given those drawn so far; None when this schema cannot fill the template."""


class _Name(str):
    """A table or column name: an identifier in SQL (``{t}``, quoted as its database's dialect
    needs: on PostgreSQL ``FullName`` must be written ``"FullName"``), words in a meaning
    (``{t:w}``), so that one format string cannot name a part two ways."""

    dialect: str

    def __new__(cls, name: str, dialect: str) -> _Name:
        self = super().__new__(cls, name)
        self.dialect = dialect
        return self

    def __format__(self, spec: str) -> str:
        return _words(self) if spec == "w" else ident(self, self.dialect)


@dataclass(frozen=True)
class _Token:
    """A drawn SQL token (an operator, a sort order, an aggregate): ``{op}`` writes the token,
    ``{op:w}`` how the meaning says it."""

    sql: Any
    words: str

    def __format__(self, spec: str) -> str:
        return self.words if spec == "w" else str(self.sql)


def _rendered(parts: Parts, dialect: str) -> Parts:
    """``parts`` for a format string: drawn tables and columns become :class:`_Name`."""
    return {
        k: _Name(v.name, dialect) if isinstance(v, Table | Column) else v for k, v in parts.items()
    }


def _table(d: Draw, parts: Parts) -> Parts | None:
    t = d.table()
    return {"t": t} if t else None


def _table_with(kind: str, key: str) -> Step:
    """A table (``t``) and one of its non-key ``kind`` columns (``key``)."""

    def step(d: Draw, parts: Parts) -> Parts | None:
        t = d.table()
        column = d.column(t, kind) if t else None
        return {"t": t, key: column} if column else None

    return step


def _labelled_numbers(d: Draw, parts: Parts) -> Parts | None:
    """:meth:`Draw.labelled_numbers` as ``t``, ``shown`` and ``n``."""
    drawn = d.labelled_numbers()
    return dict(zip(("t", "shown", "n"), drawn, strict=True)) if drawn else None


def _join_parts(j: Join, dialect: str) -> Parts:
    """A join's tables (``child``, ``parent``), keys (``fk``, ``pk``) and clause (``join``)."""
    return {
        "child": j.child,
        "parent": j.parent,
        "fk": _Name(j.fk, dialect),
        "pk": _Name(j.pk, dialect),
        "join": _joined(j, dialect),
    }


def _join(d: Draw, parts: Parts) -> Parts | None:
    j = d.join()
    return _join_parts(j, d.dialect) if j else None


def _joined_label(d: Draw, parts: Parts) -> Parts | None:
    """:meth:`Draw.joined_label`: a join and the parent's text column it shows (``label``)."""
    drawn = d.joined_label()
    return {**_join_parts(drawn[0], d.dialect), "label": drawn[1]} if drawn else None


def _bridge(d: Draw, parts: Parts) -> Parts | None:
    """:meth:`Draw.bridge`: tables ``a`` and ``b`` through the link table ``link``."""
    drawn = d.bridge()
    if not drawn:
        return None
    to_a, to_b = drawn
    return {
        "a": to_a.parent,
        "link": to_a.child,
        "b": to_b.parent,
        "a_pk": _Name(to_a.pk, d.dialect),
        "a_fk": _Name(to_a.fk, d.dialect),
        "b_fk": _Name(to_b.fk, d.dialect),
        "b_pk": _Name(to_b.pk, d.dialect),
    }


def _filter(shown_in: str, where_in: str, kind: str | None = "text") -> Step:
    """A text column of the table drawn as ``shown_in`` to show, and a stored value of a
    ``kind`` column of ``where_in`` to filter on. Both columns are drawn before either is
    checked: a miss spends the RNG as a hit does."""

    def step(d: Draw, parts: Parts) -> Parts | None:
        shown, where = d.column(parts[shown_in], "text"), d.column(parts[where_in], kind)
        value = d.value(where) if where else None
        if not shown or value is None:
            return None
        return {"shown": shown, "where": where, "value": _lit(value)}

    return step


def _other_column(d: Draw, parts: Parts) -> Parts | None:
    """A text column of ``t`` to show and a stored value of another of its columns."""
    t = parts["t"]
    shown, where = d.column(t, "text"), d.column(t)
    if not shown or not where or shown == where:
        return None
    value = d.value(where)
    return None if value is None else {"shown": shown, "where": where, "value": _lit(value)}


def _value_of(key: str) -> Step:
    """A stored value (``value``) of the column drawn as ``key``."""

    def step(d: Draw, parts: Parts) -> Parts | None:
        value = d.value(parts[key])
        return None if value is None else {"value": _lit(value)}

    return step


def _bounds(d: Draw, parts: Parts) -> Parts | None:
    """Two stored values of ``n``: ``lo`` and ``hi``."""
    lo, hi = d.value(parts["n"]), d.value(parts["n"])
    return None if lo is None or hi is None else {"lo": _lit(lo), "hi": _lit(hi)}


def _pick(key: str, words: Mapping[Any, str]) -> Step:
    """One of ``words``' tokens, drawn with the RNG, with its words."""

    def step(d: Draw, parts: Parts) -> Parts:
        token = d.rng.choice(list(words))
        return {key: _Token(token, words[token])}

    return step


_AGG_WORDS = {"avg": "average", "max": "largest", "min": "smallest", "sum": "total"}
_OP_WORDS = {">": "greater than", "<": "less than", ">=": "at least"}


def _two_aggregates(d: Draw, parts: Parts) -> Parts:
    fa, fb = d.rng.sample(list(_AGG_WORDS), 2)
    return {"fa": _Token(fa, _AGG_WORDS[fa]), "fb": _Token(fb, _AGG_WORDS[fb])}


def _compared(d: Draw, parts: Parts) -> Parts | None:
    """How ``where`` is compared: by size on a number column, else equal; never ``shown``
    itself. Its words end in a space, or are none for ``=``."""
    where = parts["where"]
    if where == parts["shown"]:
        return None
    op = d.rng.choice(list(_OP_WORDS)) if where.kind == "number" else "="
    said = _OP_WORDS.get(op, "")
    return {"op": _Token(op, said + " " if said else "")}


_SET_WORDS = {
    "INTERSECT": "the {shown:w} values found both among {t:w} rows with {n:w} greater than {lo} "
    "and among {t:w} rows with {n:w} less than {hi}",
    "EXCEPT": "the {shown:w} values of {t:w} rows with {n:w} greater than {lo}, leaving out every "
    "{shown:w} that also belongs to some {t:w} row with {n:w} less than {hi}",
    "UNION": "the {shown:w} values of {t:w} rows with {n:w} greater than {lo} or less than {hi}",
}


def _set_op(d: Draw, parts: Parts) -> Parts:
    """A set operator; its words are the whole meaning, which differs by operator."""
    op = d.rng.choice(list(_SET_WORDS))
    return {"op": _Token(op, _SET_WORDS[op].format_map(_rendered(parts, d.dialect)))}


# --- the templates -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fill:
    """A template's fill: its steps in order (the first None gives up), then its SQL and its
    meaning formatted from the parts they drew."""

    steps: tuple[Step, ...]
    sql: str
    meaning: str

    def __call__(self, d: Draw) -> Filled | None:
        parts: Parts = {}
        for step in self.steps:
            more = step(d, parts)
            if more is None:
                return None
            parts.update(more)
        shown = _rendered(parts, d.dialect)
        return self.sql.format_map(shown), self.meaning.format_map(shown)


_TABLE: tuple[tuple[str, str, tuple[Step, ...], str, str], ...] = (
    # name, level, steps, SQL, meaning
    ("count", "easy", (_table,), "SELECT count(*) FROM {t}", "how many rows the {t:w} table has"),
    (
        "project_filter",
        "easy",
        (_table, _other_column),
        "SELECT {shown} FROM {t} WHERE {where} = {value}",
        "the {shown:w} of every {t:w} row whose {where:w} is {value}",
    ),
    (
        "aggregate",
        "easy",
        (_table_with("number", "n"), _two_aggregates),
        "SELECT {fa}({n}), {fb}({n}) FROM {t}",
        "the {fa:w} and the {fb:w} {n:w} over all {t:w} rows",
    ),
    (
        "count_compare",
        "easy",
        (_table_with("number", "n"), _value_of("n"), _pick("op", _OP_WORDS)),
        "SELECT count(*) FROM {t} WHERE {n} {op} {value}",
        "how many {t:w} rows have a {n:w} {op:w} {value}",
    ),
    (
        "group_count",
        "medium",
        (_table_with("text", "g"),),
        "SELECT {g}, count(*) FROM {t} GROUP BY {g}",
        "each different {g:w} in {t:w}, with how many {t:w} rows have it",
    ),
    (
        "top",
        "medium",
        (_labelled_numbers, _pick("order", {"DESC": "largest", "ASC": "smallest"})),
        "SELECT {shown} FROM {t} ORDER BY {n} {order} LIMIT 1",
        "the {shown:w} of the {t:w} row with the {order:w} {n:w}",
    ),
    (
        "join_filter",
        "medium",
        (_join, _filter("child", "parent")),
        "SELECT T1.{shown} FROM {join} WHERE T2.{where} = {value}",
        "the {shown:w} of every {child:w} row whose linked {parent:w} row has the {where:w} "
        "{value}",
    ),
    (
        "join_group",
        "medium",
        (_joined_label,),
        "SELECT T2.{label}, count(*) FROM {join} GROUP BY T2.{pk}",
        "for each {parent:w} row that {child:w} rows refer to: its {label:w} and how many "
        "{child:w} rows refer to it (a count of {child:w} rows)",
    ),
    (
        "join_project",
        "medium",
        (_joined_label, _filter("child", "child", None), _compared),
        "SELECT T1.{shown}, T2.{label} FROM {join} WHERE T1.{where} {op} {value}",
        "the {shown:w} of every {child:w} row whose {where:w} is {op:w}{value}, each with the "
        "{label:w} of the {parent:w} row it refers to",
    ),
    (
        "having",
        "hard",
        (_table_with("text", "g"), _pick("k", {1: "1", 2: "2"})),
        "SELECT {g} FROM {t} GROUP BY {g} HAVING count(*) > {k}",
        "the {g:w} values that more than {k} {t:w} rows share (the values themselves, not a count)",
    ),
    (
        "above_average",
        "hard",
        (_labelled_numbers, _pick("op", {">": "above", "<": "below"})),
        "SELECT {shown} FROM {t} WHERE {n} {op} (SELECT avg({n}) FROM {t})",
        "the {shown:w} of every {t:w} row whose {n:w} is {op:w} the average {n:w} of all {t:w} "
        "rows",
    ),
    (
        "without",
        "hard",
        (_joined_label,),
        "SELECT {label} FROM {parent} WHERE {pk} NOT IN (SELECT {fk} FROM {child})",
        "the {label:w} of every {parent:w} row that no {child:w} row refers to",
    ),
    (
        "bridge",
        "hard",
        (_bridge, _filter("a", "b")),
        "SELECT T1.{shown} FROM {a} AS T1 JOIN {link} AS T2 ON T1.{a_pk} = T2.{a_fk} "
        "JOIN {b} AS T3 ON T2.{b_fk} = T3.{b_pk} WHERE T3.{where} = {value}",
        "the {shown:w} of every {a:w} row that a {link:w} row links to a {b:w} row whose "
        "{where:w} is {value} (once per such link)",
    ),
    (
        "join_top",
        "extra",
        (_joined_label,),
        "SELECT T2.{label} FROM {join} GROUP BY T2.{pk} ORDER BY count(*) DESC LIMIT 1",
        "the {label:w} of the {parent:w} row that the most {child:w} rows refer to (counting "
        "{child:w} rows)",
    ),
    (
        "both",
        "extra",
        (_labelled_numbers, _bounds, _set_op),
        "SELECT {shown} FROM {t} WHERE {n} > {lo} {op} SELECT {shown} FROM {t} WHERE {n} < {hi}",
        "{op:w}",
    ),
)

Template = tuple[str, str, Callable[[Draw], "Filled | None"]]
TEMPLATES: tuple[Template, ...] = tuple(
    (name, level, _Fill(steps, sql, meaning)) for name, level, steps, sql, meaning in _TABLE
)
"""Template name, the level it aims at (the pair's own level is computed from its SQL), fill."""
GROUPING = frozenset({"group_count", "join_group"})
"""Templates whose last column is a count per group."""
