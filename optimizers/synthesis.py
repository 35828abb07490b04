"""Synthesized training pairs for a database nobody labelled: SQL from templates, questions by the LM.

A user has a database, not a train set. Demos and validation questions from *other* databases cost
a small model 12-17 EX points here (the README's compile tables), so the pairs a compile learns
from should come from the user's own database. This module makes them, in the spirit of
OmniSQL's SynSQL and SENSE, scaled to a 2-core CPU:

1. **SQL from structures, re-targeted to this schema.** A table of templates (:data:`TEMPLATES`)
   covers Spider's hardness mix (counts, filters, aggregates, GROUP BY/HAVING, ORDER BY/LIMIT,
   joins along one foreign key or two through a link table, nested and set queries). Each is
   filled with this schema's tables, keys, typed columns and *stored* values, drawn with a
   seeded RNG. No LM call, no gold question.
2. **Kept only if it is a good label.** Every query is executed read-only with a time limit and
   kept only if it runs, returns rows (at most :data:`MAX_ROWS`), is deterministic (no tie at an
   ORDER BY ... LIMIT boundary), is not a duplicate (same normalised SQL, or same template and
   result) and is not trivial (a bare ``SELECT *``).
3. **The question is written by the LM** from the SQL, the DDL of the tables it reads and the
   template's *meaning*: what the SQL returns in plain words, built from the same drawn parts
   (:class:`~sqlweave.signatures.DescribeSQL`). Reading the SQL alone, the 1.5B model misread
   the templates whose meaning their surface hides (a HAVING asked as a count, a count of child
   rows named as a count of parents); paraphrasing the meaning, it writes what the SQL asks.
4. **Round trip.** A program (``direct`` by default) answers the written question; the pair is
   kept only when its SQL returns the template SQL's result. That filters questions the LM wrote
   badly, at the price of keeping fewer of the hardest pairs (recorded per difficulty).
   With ``accept="any"`` a pair is kept when *any* candidate the program weighed returns that
   result (a sampling program's pool: ``direct`` with ``samples=8``): a question some reading of
   which gives the label, not only the reading the program settles on (checked by the answer
   alone, the set holds only what the program already solves). Measured on validation it
   admitted more wrong questions than hard right ones and did not help a compile (README,
   "Your own questions"), so ``"answer"`` stays the default.

Output is the questions-file format :func:`sqlweave.data.load_questions` reads (JSON Lines, one
pair per line, ``db_path``, ``question``, ``gold_sql``, ``difficulty``, ``source: "synthetic"``).
Runs are resumable: every tried query's verdict goes to ``<out>.tried.jsonl``, and a second run
skips what it already tried and stops when the file holds ``n`` pairs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlweave.db import Database, ExecutionError
from sqlweave.errors import SqlweaveError
from sqlweave.hardness import spider_hardness
from sqlweave.schema import Column, Schema, Table, ident, introspect

logger = logging.getLogger(__name__)

MAX_ROWS = 50
"""A label whose answer is longer than this is a listing, not a question a user asks."""
TIMEOUT_S = 5.0
MAX_DRAWS_PER_PAIR = 12
"""Template draws per wanted pair before giving up (a schema with few usable columns)."""
ROUND_TRIP_DRAFTS = 6
"""Checked drafts tried per wanted pair before a run settles for fewer pairs."""
ROUND_TRIP_ACCEPT = ("answer", "any")
"""What the round trip compares with the label: the program's answer, or any of its candidates."""
ROUND_TRIP_REJECTED = "round trip: the question leads to another answer"
"""The ``why`` of a written question the round trip rejected, in ``<out>.tried.jsonl``."""
DIFFICULTY_MIX = {"easy": 0.25, "medium": 0.40, "hard": 0.20, "extra": 0.15}
"""Spider dev's hardness shares, roughly: what the templates are drawn towards."""


class SynthesisError(SqlweaveError, ValueError):
    """The database cannot yield pairs (no tables, no rows) or the arguments are wrong."""


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


# --- drafting and checking SQL ----------------------------------------------------------------


@dataclass(frozen=True)
class Draft:
    """A template SQL that passed the execution checks, with what it returned."""

    template: str
    sql: str
    difficulty: str
    n_rows: int
    result_hash: str
    meaning: str = ""
    """What the SQL returns in plain words (the template's gloss; "" when unknown)."""


def _normal(sql: str) -> str:
    return re.sub(r"\s+", " ", sql.strip().lower())


def _result_hash(rows: Sequence[tuple]) -> str:
    text = json.dumps(sorted(map(repr, rows)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_draft(db: Database, template: str, sql: str, meaning: str = "") -> Draft | str:
    """A :class:`Draft` when ``sql`` is a usable label on ``db``, else the reason it is not."""
    try:
        result = db.execute(sql, timeout_s=TIMEOUT_S, max_rows=MAX_ROWS + 1)
    except ExecutionError as err:
        return f"does not run: {err.kind}"
    rows = list(result.rows)
    if not rows:
        return "returns no rows"
    if len(rows) > MAX_ROWS or result.truncated:
        return f"returns more than {MAX_ROWS} rows"
    if all(v is None for row in rows for v in row):
        return "returns only NULL"
    if template in GROUPING and all(row[-1] == 1 for row in rows):
        return "every group holds one row: the grouping says nothing"
    if " LIMIT " in sql.upper() and not _limit_is_determined(db, sql):
        return "a tie at the LIMIT boundary: the answer is not determined"
    return Draft(template, sql, spider_hardness(sql), len(rows), _result_hash(rows), meaning)


def _limit_is_determined(db: Database, sql: str) -> bool:
    """For ``... ORDER BY key LIMIT k``: the k-th and (k+1)-th rows' order keys differ."""
    match = re.search(r"ORDER BY (.+?) (ASC|DESC) LIMIT (\d+)\s*$", sql, flags=re.IGNORECASE)
    if not match:
        return False
    key, direction, k = match.group(1), match.group(2), int(match.group(3))
    head = sql[: match.start()]
    # The same query asking for the order keys of the first k+1 rows instead of the answer.
    probe = f"{head.rstrip()} ORDER BY {key} {direction} LIMIT {k + 1}"
    probe = re.sub(r"^SELECT .+? FROM", f"SELECT {key} FROM", probe, count=1, flags=re.S)
    try:
        keys = [row[0] for row in db.execute(probe, timeout_s=TIMEOUT_S).rows]
    except ExecutionError:
        return False
    return len(keys) <= k or keys[k - 1] != keys[k]


def draft_queries(
    db: Database, n: int, *, seed: int = 0, skip: set[str] | None = None
) -> Iterator[Draft | tuple[str, str, str]]:
    """Yield checked drafts (and ``(template, sql, reason)`` for rejected ones) until ``n``
    drafts or :data:`MAX_DRAWS_PER_PAIR` ``* n`` draws; levels drawn towards :data:`DIFFICULTY_MIX`.

    ``skip`` holds normalised SQL already tried (a resumed run); duplicates never repeat.
    """
    schema = introspect(db)
    if not schema.tables:
        raise SynthesisError(f"{db.name}: the database has no tables")
    rng = random.Random(f"synthesize:{db.name}:{seed}")
    draw = Draw(schema, rng)
    if not draw.tables:
        raise SynthesisError(f"{db.name}: every table is empty; there is nothing to ask about")
    seen = set(skip or ())
    results: set[tuple[str, str]] = set()
    by_level: dict[str, list[Template]] = {}
    for tpl in TEMPLATES:
        by_level.setdefault(tpl[1], []).append(tpl)
    levels, weights = zip(*DIFFICULTY_MIX.items(), strict=True)
    made = 0
    for _ in range(MAX_DRAWS_PER_PAIR * n):
        if made >= n:
            return
        level = rng.choices(levels, weights)[0]
        name, _level, fill = rng.choice(by_level[level])
        filled = fill(draw)
        if filled is None or _normal(filled[0]) in seen:
            continue
        sql, meaning = filled
        seen.add(_normal(sql))
        verdict = check_draft(db, name, sql, meaning)
        if isinstance(verdict, str):
            yield (name, sql, verdict)
            continue
        if (name, verdict.result_hash) in results:
            yield (name, sql, "same template and result as a kept query")
            continue
        results.add((name, verdict.result_hash))
        made += 1
        yield verdict


# --- questions, the round trip, the file ------------------------------------------------------


def describe(draft: Draft, db: Database, describer: Any, *, sample_rows: int = 0) -> str:
    """The LM's question for ``draft.sql``, from the DDL of the tables it reads and the draft's
    meaning in plain words ("" on garbage).

    ``sample_rows > 0`` shows that many stored rows under each table (Dubo-SQL v1's layout): a
    column whose name alone misleads (an episode's ``Number_in_season`` read as a count of
    seasons) is told apart by what it holds.
    """
    import sqlglot
    from sqlglot import exp

    from sqlweave.adapter import use_default_adapter
    from sqlweave.schema import render_ddl_with_rows

    schema = introspect(db)  # with up to five stored rows per table
    try:
        tree = sqlglot.parse_one(draft.sql, read="sqlite")
        schema = schema.subset(tables=[t.name for t in tree.find_all(exp.Table)])
    except sqlglot.errors.SqlglotError:
        pass
    ddl = render_ddl_with_rows(schema, rows=sample_rows, layout="pretty")  # 0: the DDL alone
    with use_default_adapter():
        try:
            out = describer(db_schema=ddl, sql=draft.sql, meaning=draft.meaning or "(not given)")
        except Exception as err:  # noqa: BLE001 - a garbage reply rejects the pair, not the run
            from sqlweave.failures import raise_if_run_failure

            raise_if_run_failure(err)
            logger.debug("describe failed: %s", err)
            return ""
    question = " ".join(str(getattr(out, "question", "") or "").split())
    return question if _plausible_question(question) else ""


def _plausible_question(text: str) -> bool:
    """A sentence, not SQL echoed back or a fragment."""
    low = text.lower()
    looks_like_sql = low.startswith("select") or ("select " in low and " from " in low)
    return 12 <= len(text) <= 400 and not looks_like_sql


def round_trip(
    question: str, draft: Draft, db: Database, program: Any, accept: str = "answer"
) -> bool:
    """Whether ``program`` answers ``question`` with SQL that returns ``draft.sql``'s result;
    with ``accept="any"``, whether its answer or any candidate it weighed does."""
    from sqlweave.evaluate import candidates_of
    from sqlweave.metrics import check_execution, pred_sql_of

    try:
        pred = program(question=question, db=db)
    except Exception as err:  # noqa: BLE001 - one failed answer rejects the pair
        from sqlweave.failures import raise_if_run_failure

        raise_if_run_failure(err)
        logger.debug("round trip failed: %s", err)
        return False
    sqls = [pred_sql_of(pred)]
    if accept == "any":
        sqls += [c["sql"] for c in candidates_of(pred) if c["sql"].strip()]
    return any(
        check_execution(sql, draft.sql, db, "spider", timeout_s=TIMEOUT_S).correct
        for sql in dict.fromkeys(sqls)  # each distinct query run once, the answer first
    )


def database_ref(database: Database) -> str:
    """What a pair's ``db_path`` holds: a SQLite file's path, else the URL (a DuckDB file too:
    its bare path would be opened as SQLite)."""
    if database.dialect == "sqlite" and database.path is not None:
        return str(database.path)
    return database.url


def read_pairs(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON Lines file this module wrote ([] when there is none); a line cut
    short by an interrupted write is skipped with a warning."""
    return _read_jsonl(path)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                logger.warning("%s: skipped a broken line (an interrupted write)", path)
    return out


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        fh.flush()


def synthesize(
    db: Database | str | Path,
    n: int,
    *,
    out: str | Path | None = None,
    seed: int = 0,
    program: Any = "direct",
    check: bool = True,
    progress: bool = True,
    sample_rows: int = 0,
    accept: str = "answer",
) -> list[dict[str, Any]]:
    """``n`` question/SQL pairs for ``db``, in the questions-file format (see the module doc).

    ``db`` is an open :class:`~sqlweave.db.Database`, a SQLite path or a SQLAlchemy URL.
    ``program`` (a registry name or a program) answers each written question for the round trip;
    ``check=False`` skips it (every question the LM writes is kept). With ``out``, pairs are
    appended to that JSON Lines file as they are accepted and every tried query's verdict to
    ``<out>.tried.jsonl``: an interrupted run resumes where it stopped. ``sample_rows`` shows the
    question writer that many stored rows per table (:func:`describe`). ``accept`` (one of
    :data:`ROUND_TRIP_ACCEPT`): the round trip keeps a pair when the program's answer returns
    the label's rows (``"answer"``) or when any candidate it weighed does (``"any"``; give it a
    sampling program). Uses DSPy's configured LM.
    Returns the pairs (all of ``out``'s, when resuming).
    """
    import dspy
    from tqdm.auto import tqdm

    from sqlweave.programs import get
    from sqlweave.programs.base import resolve_database
    from sqlweave.signatures import DescribeSQL

    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise SynthesisError(f"n must be a positive integer, got {n!r}")
    if accept not in ROUND_TRIP_ACCEPT:
        raise SynthesisError(
            f"accept must be one of {', '.join(ROUND_TRIP_ACCEPT)}, not {accept!r}"
        )
    database = resolve_database(db)
    out_path = Path(out) if out is not None else None
    tried_path = out_path.with_name(out_path.name + ".tried.jsonl") if out_path else None
    pairs = _read_jsonl(out_path) if out_path else []
    tried = _read_jsonl(tried_path) if tried_path else []
    skip = {_normal(t["sql"]) for t in tried if "sql" in t}
    if len(pairs) >= n:
        return pairs[:n]
    answerer = get(program) if isinstance(program, str) else program
    describer = dspy.Predict(DescribeSQL)
    db_ref = database_ref(database)
    bar = tqdm(
        total=n, initial=len(pairs), desc=f"synthesize {database.name}", disable=not progress
    )
    try:
        # Up to ROUND_TRIP_DRAFTS drafts per pair still wanted: the round trip rejects many.
        wanted = (n - len(pairs)) * ROUND_TRIP_DRAFTS
        for item in draft_queries(database, wanted, seed=seed + len(tried), skip=skip):
            if isinstance(item, tuple):
                verdict = {"template": item[0], "sql": item[1], "kept": False, "why": item[2]}
            else:
                question = describe(item, database, describer, sample_rows=sample_rows)
                if not question:
                    why = "the LM wrote no usable question"
                elif check and not round_trip(question, item, database, answerer, accept):
                    why = ROUND_TRIP_REJECTED
                else:
                    why = ""
                verdict = {
                    "template": item.template,
                    "sql": item.sql,
                    "meaning": item.meaning,
                    "question": question,
                    "kept": not why,
                    "why": why or "kept",
                }
                if not why:
                    pair = {
                        "question_id": f"syn_{database.name}_{len(pairs):05d}",
                        "db_id": database.name,
                        "db_path": db_ref,
                        "question": question,
                        "gold_sql": item.sql,
                        "difficulty": item.difficulty,
                        "template": item.template,
                        "meaning": item.meaning,
                        "source": "synthetic",
                    }
                    pairs.append(pair)
                    if out_path:
                        _append(out_path, pair)
                    bar.update(1)
            if tried_path:
                _append(tried_path, verdict)
            if len(pairs) >= n:
                break
    finally:
        bar.close()
    if len(pairs) < n:
        logger.warning(
            "%s: %d of %d pairs (the schema offered too few usable queries)",
            database.name,
            len(pairs),
            n,
        )
    return pairs
