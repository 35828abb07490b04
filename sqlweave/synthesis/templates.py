"""The SQL templates of data synthesis: each fills itself from one schema's tables, keys, typed
columns and *stored* values, drawn with a seeded RNG (step 1 of :mod:`sqlweave.synthesis.pairs`).

A template is ``(name, level, fill)``: ``fill`` takes a :class:`Draw` and returns the SQL and its
meaning in plain words, or None when this schema has nothing to fill it with. No LM call, no
gold question: what is kept is decided by :mod:`sqlweave.synthesis.drafts`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
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


def _c(table: Table, column: Column | str, alias: str | None = None) -> str:
    name = column if isinstance(column, str) else column.name
    return f"{alias}.{ident(name)}" if alias else ident(name)


def _t(table: Table) -> str:
    return ident(table.name)


def _joined(j: Join) -> str:
    """``child AS T1 JOIN parent AS T2 ON T1.fk = T2.pk``: the one join every template writes."""
    return f"{_t(j.child)} AS T1 JOIN {_t(j.parent)} AS T2 ON T1.{ident(j.fk)} = T2.{ident(j.pk)}"


# --- the templates: (name, level, fill) --------------------------------------------------------
# Each fill takes a Draw and returns (SQL, meaning), or None when this schema has nothing to fill
# it with. The meaning says in plain words what the SQL returns, built from the same drawn parts:
# the question writer paraphrases it instead of reading the SQL alone, which a 1.5B model misreads
# most on the templates whose meaning its surface hides (a HAVING read as a count, a count of
# child rows named as a count of the parents, EXCEPT read as a range).


Filled = tuple[str, str]
"""A template's SQL and its meaning in plain words."""


def _words(name: str) -> str:
    """A table or column name as words: ``Total_Horses`` -> ``total horses``, ``ShopId`` ->
    ``shop id``. Not :func:`sqlweave.schema_filter.words`: its match tokens keep ASCII letters
    and digits only, which would show the question writer ``Nom Côté`` as ``nom c t``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return " ".join(re.sub(r"[_\-.]+", " ", spaced).split()).lower()


_AGG_WORDS = {"avg": "average", "max": "largest", "min": "smallest", "sum": "total"}
_OP_WORDS = {">": "greater than", "<": "less than", ">=": "at least"}


def _count(d: Draw) -> Filled | None:
    t = d.table()
    if not t:
        return None
    return f"SELECT count(*) FROM {_t(t)}", f"how many rows the {_words(t.name)} table has"


def _project_filter(d: Draw) -> Filled | None:
    t = d.table()
    if not t:
        return None
    shown, where = d.column(t, "text"), d.column(t)
    if not shown or not where or shown == where:
        return None
    value = d.value(where)
    if value is None:
        return None
    return (
        f"SELECT {_c(t, shown)} FROM {_t(t)} WHERE {_c(t, where)} = {_lit(value)}",
        f"the {_words(shown.name)} of every {_words(t.name)} row whose {_words(where.name)} is "
        f"{_lit(value)}",
    )


def _aggregate(d: Draw) -> Filled | None:
    t = d.table()
    n = d.column(t, "number") if t else None
    if not n:
        return None
    fa, fb = d.rng.sample(["avg", "max", "min", "sum"], 2)
    return (
        f"SELECT {fa}({_c(t, n)}), {fb}({_c(t, n)}) FROM {_t(t)}",
        f"the {_AGG_WORDS[fa]} and the {_AGG_WORDS[fb]} {_words(n.name)} over all "
        f"{_words(t.name)} rows",
    )


def _count_compare(d: Draw) -> Filled | None:
    t = d.table()
    n = d.column(t, "number") if t else None
    value = d.value(n) if n else None
    if value is None:
        return None
    op = d.rng.choice([">", "<", ">="])
    return (
        f"SELECT count(*) FROM {_t(t)} WHERE {_c(t, n)} {op} {_lit(value)}",
        f"how many {_words(t.name)} rows have a {_words(n.name)} {_OP_WORDS[op]} {_lit(value)}",
    )


def _group_count(d: Draw) -> Filled | None:
    t = d.table()
    g = d.column(t, "text") if t else None
    if not g:
        return None
    return (
        f"SELECT {_c(t, g)}, count(*) FROM {_t(t)} GROUP BY {_c(t, g)}",
        f"each different {_words(g.name)} in {_words(t.name)}, with how many "
        f"{_words(t.name)} rows have it",
    )


def _top(d: Draw) -> Filled | None:
    drawn = d.labelled_numbers()
    if not drawn:
        return None
    t, shown, n = drawn
    order = d.rng.choice(["DESC", "ASC"])
    most = "largest" if order == "DESC" else "smallest"
    return (
        f"SELECT {_c(t, shown)} FROM {_t(t)} ORDER BY {_c(t, n)} {order} LIMIT 1",
        f"the {_words(shown.name)} of the {_words(t.name)} row with the {most} {_words(n.name)}",
    )


def _join_filter(d: Draw) -> Filled | None:
    j = d.join()
    if not j:
        return None
    shown, where = d.column(j.child, "text"), d.column(j.parent, "text")
    value = d.value(where) if where else None
    if not shown or value is None:
        return None
    return (
        f"SELECT T1.{ident(shown.name)} FROM {_joined(j)} "
        f"WHERE T2.{ident(where.name)} = {_lit(value)}",
        f"the {_words(shown.name)} of every {_words(j.child.name)} row whose linked "
        f"{_words(j.parent.name)} row has the {_words(where.name)} {_lit(value)}",
    )


def _join_group(d: Draw) -> Filled | None:
    drawn = d.joined_label()
    if not drawn:
        return None
    j, shown = drawn
    child, parent = _words(j.child.name), _words(j.parent.name)
    return (
        f"SELECT T2.{ident(shown.name)}, count(*) FROM {_joined(j)} GROUP BY T2.{ident(j.pk)}",
        f"for each {parent} row that {child} rows refer to: its {_words(shown.name)} and how "
        f"many {child} rows refer to it (a count of {child} rows)",
    )


def _having(d: Draw) -> Filled | None:
    t = d.table()
    g = d.column(t, "text") if t else None
    if not g:
        return None
    k = d.rng.choice([1, 2])
    return (
        f"SELECT {_c(t, g)} FROM {_t(t)} GROUP BY {_c(t, g)} HAVING count(*) > {k}",
        f"the {_words(g.name)} values that more than {k} {_words(t.name)} rows share "
        f"(the values themselves, not a count)",
    )


def _above_average(d: Draw) -> Filled | None:
    drawn = d.labelled_numbers()
    if not drawn:
        return None
    t, shown, n = drawn
    op = d.rng.choice([">", "<"])
    side = "above" if op == ">" else "below"
    return (
        f"SELECT {_c(t, shown)} FROM {_t(t)} WHERE {_c(t, n)} {op} "
        f"(SELECT avg({_c(t, n)}) FROM {_t(t)})",
        f"the {_words(shown.name)} of every {_words(t.name)} row whose {_words(n.name)} is "
        f"{side} the average {_words(n.name)} of all {_words(t.name)} rows",
    )


def _without(d: Draw) -> Filled | None:
    drawn = d.joined_label()
    if not drawn:
        return None
    j, shown = drawn
    return (
        f"SELECT {ident(shown.name)} FROM {_t(j.parent)} WHERE {ident(j.pk)} NOT IN "
        f"(SELECT {ident(j.fk)} FROM {_t(j.child)})",
        f"the {_words(shown.name)} of every {_words(j.parent.name)} row that no "
        f"{_words(j.child.name)} row refers to",
    )


def _join_top(d: Draw) -> Filled | None:
    drawn = d.joined_label()
    if not drawn:
        return None
    j, shown = drawn
    child, parent = _words(j.child.name), _words(j.parent.name)
    return (
        f"SELECT T2.{ident(shown.name)} FROM {_joined(j)} GROUP BY T2.{ident(j.pk)} "
        f"ORDER BY count(*) DESC LIMIT 1",
        f"the {_words(shown.name)} of the {parent} row that the most {child} rows refer to "
        f"(counting {child} rows)",
    )


def _join_project(d: Draw) -> Filled | None:
    """Columns of both joined tables, filtered on another of the child's columns: the question
    names what it wants from each table, and the SQL must join to give both."""
    drawn = d.joined_label()
    if not drawn:
        return None
    j, parent_shown = drawn
    shown, where = d.column(j.child, "text"), d.column(j.child)
    value = d.value(where) if where else None
    if not shown or value is None or where == shown:
        return None
    op = d.rng.choice([">", "<", ">="]) if where.kind == "number" else "="
    said = _OP_WORDS.get(op, "")
    return (
        f"SELECT T1.{ident(shown.name)}, T2.{ident(parent_shown.name)} FROM {_joined(j)} "
        f"WHERE T1.{ident(where.name)} {op} {_lit(value)}",
        f"the {_words(shown.name)} of every {_words(j.child.name)} row whose "
        f"{_words(where.name)} is {said + ' ' if said else ''}{_lit(value)}, each with the "
        f"{_words(parent_shown.name)} of the {_words(j.parent.name)} row it refers to",
    )


def _bridge(d: Draw) -> Filled | None:
    """Rows of one table reached from a value of another through a link table (three tables,
    two keys): where a small model most often names a column of a table it never joined."""
    drawn = d.bridge()
    if not drawn:
        return None
    to_a, to_b = drawn
    shown, where = d.column(to_a.parent, "text"), d.column(to_b.parent, "text")
    value = d.value(where) if where else None
    if not shown or value is None:
        return None
    a, link, b = to_a.parent, to_a.child, to_b.parent
    return (
        f"SELECT T1.{ident(shown.name)} FROM {_t(a)} AS T1 JOIN {_t(link)} AS T2 "
        f"ON T1.{ident(to_a.pk)} = T2.{ident(to_a.fk)} JOIN {_t(b)} AS T3 "
        f"ON T2.{ident(to_b.fk)} = T3.{ident(to_b.pk)} WHERE T3.{ident(where.name)} = "
        f"{_lit(value)}",
        f"the {_words(shown.name)} of every {_words(a.name)} row that a {_words(link.name)} "
        f"row links to a {_words(b.name)} row whose {_words(where.name)} is {_lit(value)} "
        f"(once per such link)",
    )


_SET_WORDS = {
    "INTERSECT": "the {s} values found both among {t} rows with {w} greater than {lo} and "
    "among {t} rows with {w} less than {hi}",
    "EXCEPT": "the {s} values of {t} rows with {w} greater than {lo}, leaving out every {s} "
    "that also belongs to some {t} row with {w} less than {hi}",
    "UNION": "the {s} values of {t} rows with {w} greater than {lo} or less than {hi}",
}


def _both(d: Draw) -> Filled | None:
    drawn = d.labelled_numbers()
    if not drawn:
        return None
    t, shown, where = drawn
    lo, hi = d.value(where), d.value(where)
    if lo is None or hi is None:
        return None
    op = d.rng.choice(["INTERSECT", "EXCEPT", "UNION"])
    meaning = _SET_WORDS[op].format(
        s=_words(shown.name), t=_words(t.name), w=_words(where.name), lo=_lit(lo), hi=_lit(hi)
    )
    return (
        f"SELECT {_c(t, shown)} FROM {_t(t)} WHERE {_c(t, where)} > {_lit(lo)} {op} "
        f"SELECT {_c(t, shown)} FROM {_t(t)} WHERE {_c(t, where)} < {_lit(hi)}",
        meaning,
    )


Template = tuple[str, str, Callable[[Draw], "Filled | None"]]
TEMPLATES: tuple[Template, ...] = (
    ("count", "easy", _count),
    ("project_filter", "easy", _project_filter),
    ("aggregate", "easy", _aggregate),
    ("count_compare", "easy", _count_compare),
    ("group_count", "medium", _group_count),
    ("top", "medium", _top),
    ("join_filter", "medium", _join_filter),
    ("join_group", "medium", _join_group),
    ("join_project", "medium", _join_project),
    ("having", "hard", _having),
    ("above_average", "hard", _above_average),
    ("without", "hard", _without),
    ("bridge", "hard", _bridge),
    ("join_top", "extra", _join_top),
    ("both", "extra", _both),
)
"""Template name, the level it aims at (the pair's own level is computed from its SQL), fill."""
GROUPING = frozenset({"group_count", "join_group"})
"""Templates whose last column is a count per group."""
