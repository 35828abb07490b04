"""Schema linking: which tables and columns a question needs, so the prompt can leave out the rest.

Three sources, each matched against the real schema so nothing downstream sees an invented name:

* **forward** (RSL-SQL): the LM lists ``table.column`` names (:class:`ForwardLinker`);
* **backward** from a draft SQL: the tables it reads (PET-SQL, :func:`tables_in_sql`) or every
  column whose name occurs in its text (RSL-SQL, :func:`columns_in_sql`);
* **evidence**: columns named in BIRD's external knowledge (:func:`columns_in_text`).

:func:`union` / :class:`BidirectionalLinker` combine them; :meth:`LinkedSchema.subset` turns the
result into a pruned :class:`~sqlweave.schema.Schema` for the renderers.
"""

from __future__ import annotations

import difflib
import functools
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import dspy
import sqlglot
from dspy.utils.exceptions import AdapterParseError
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from sqlweave.schema import Schema, render_ddl
from sqlweave.signatures import LinkSchema

logger = logging.getLogger(__name__)

#: difflib ratio above which a misspelt LM name is taken as the schema name it resembles.
FUZZY_CUTOFF = 0.8
#: A looser ratio inside one known table, where few names compete (``nmae`` -> ``Name``).
TABLE_FUZZY_CUTOFF = 0.7


# --- the linked set ------------------------------------------------------------------------------


@dataclass
class LinkedSchema:
    """Linked parts of a schema, with the schema's own spelling of every name.

    ``tables`` are kept **whole** (PET-SQL links tables only); ``columns`` are single
    ``(table, column)`` pairs whose tables are kept with just those columns (plus join keys).
    """

    tables: set[str] = field(default_factory=set)
    columns: set[tuple[str, str]] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.tables or self.columns)

    def __or__(self, other: LinkedSchema) -> LinkedSchema:
        return LinkedSchema(self.tables | other.tables, self.columns | other.columns)

    @property
    def all_tables(self) -> set[str]:
        """Every table touched: the whole ones and those of single columns."""
        return self.tables | {t for t, _ in self.columns}

    @classmethod
    def from_tables(cls, tables: Iterable[str]) -> LinkedSchema:
        """A table-only link (PET-SQL), e.g. from :func:`tables_in_sql`."""
        return cls(tables=set(tables))

    def names(self) -> list[str]:
        """Sorted ``table.column`` strings (whole tables as ``table.*``), for hints and logs."""
        out = [f"{t}.{c}" for t, c in self.columns] + [f"{t}.*" for t in self.tables]
        return sorted(out, key=str.lower)

    def subset(
        self, schema: Schema, *, keep_keys: bool = True, bridges: bool = True, fallback: bool = True
    ) -> Schema:
        """The pruned schema for prompts.

        ``keep_keys`` keeps primary keys and the foreign-key columns between kept tables;
        ``bridges`` also keeps the key columns of a table that joins two linked tables that have no
        foreign key between them (``singer_in_concert`` between ``singer`` and ``concert``), since a
        linker that names both ends usually forgets the link table. With ``fallback`` an empty
        link returns the full schema: a failed linker must not leave the generator with nothing.
        """
        if not self and fallback:
            return schema
        columns: set[tuple[str, str]] = set(self.columns)
        if bridges and keep_keys:
            columns |= _bridge_columns(schema, self.all_tables)
        return schema.subset(tables=self.tables, columns=columns, keep_keys=keep_keys)


def union(*linked: LinkedSchema | None) -> LinkedSchema:
    """The union of several links (forward ∪ backward ∪ evidence); ``None`` entries are skipped."""
    out = LinkedSchema()
    for item in linked:
        if item is not None:
            out = out | item
    return out


def _bridge_columns(schema: Schema, tables: set[str]) -> set[tuple[str, str]]:
    """Key columns of tables that connect two linked tables not joined directly."""
    edges: dict[frozenset[str], bool] = {}
    touching: dict[str, set[str]] = {}
    for fk in schema.foreign_keys:
        edges[frozenset((fk.table, fk.ref_table))] = True
        touching.setdefault(fk.table, set()).add(fk.ref_table)
        touching.setdefault(fk.ref_table, set()).add(fk.table)
    linked = sorted(tables)
    out: set[tuple[str, str]] = set()
    for i, a in enumerate(linked):
        for b in linked[i + 1 :]:
            if frozenset((a, b)) in edges:
                continue
            for middle in touching.get(a, set()) & touching.get(b, set()):
                if middle in tables:
                    continue
                for fk in schema.foreign_keys:
                    pair = {fk.table, fk.ref_table}
                    if middle in pair and pair & {a, b}:
                        out.add((fk.table, fk.column))
                        out.add((fk.ref_table, fk.ref_column))
    return out


# --- backward linking from SQL, and names in text --------------------------------------------------


def tables_in_sql(sql: str, schema: Schema, dialect: str | None = None) -> set[str]:
    """Schema tables a query reads (PET-SQL's linking: tables only, parsed with sqlglot).

    Names match the schema case-insensitively; CTE names and unknown tables are dropped. SQL that
    sqlglot cannot parse falls back to tables whose names occur as words in the text.
    """
    try:
        tree = sqlglot.parse_one(sql, read=dialect or schema.dialect)
    except (ParseError, TokenError) as err:
        logger.debug("tables_in_sql: unparsable SQL, matching words instead: %s", err)
        return {t.name for t in schema.tables if _occurs(t.name, sql)}
    out = set()
    for node in tree.find_all(exp.Table):
        found = schema.find_table(node.name)
        if found is not None:
            out.add(found.name)
    return out


def columns_in_sql(sql: str, schema: Schema) -> LinkedSchema:
    """RSL-SQL backward linking: every schema column whose name occurs as a word in ``sql``.

    Plain case-insensitive name matching, no parsing: a column of any table with that name is
    linked, which favours recall (the draft may use the right column on the wrong table), and it
    still works on SQL that does not parse. Only columns are returned, each with its table.
    """
    return _columns_named_in(sql, schema)


def columns_in_text(text: str, schema: Schema) -> LinkedSchema:
    """Columns named in free text such as BIRD evidence (``full name refers to full_name``).

    Matches a column's name, or the name with underscores read as spaces, as whole words.
    """
    linked = _columns_named_in(text, schema)
    spaced = _columns_named_in(text, schema, spaced=True)
    return linked | spaced


def _columns_named_in(text: str, schema: Schema, spaced: bool = False) -> LinkedSchema:
    if not text:
        return LinkedSchema()
    cols = set()
    for table, column in schema.all_columns():
        name = column.name.replace("_", " ") if spaced else column.name
        if spaced and name == column.name:
            continue
        if _occurs(name, text):
            cols.add((table.name, column.name))
    return LinkedSchema(columns=cols)


@functools.lru_cache(maxsize=8192)
def _word_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", re.I)


def _occurs(name: str, text: str) -> bool:
    return bool(name) and _word_pattern(name).search(text) is not None


# --- matching LM output to the schema --------------------------------------------------------------

_STRIP = "`\"'[]() \t*,;"
_RAW_NAME = re.compile(r"[A-Za-z_][\w$]*(?:\s*\.\s*[A-Za-z_][\w$]*)?")


def match_names(names: Iterable[Any], schema: Schema, fuzzy: bool = True) -> LinkedSchema:
    """Map LM-written names onto the schema; unknown names are dropped.

    Accepts ``table.column`` or a bare ``column`` (linked in every table that has it) or a bare
    ``table`` (kept whole), compared case-insensitively. With ``fuzzy``, a near miss
    (``singer.nmae``) is matched by difflib to the closest real name.
    """
    out = LinkedSchema()
    for raw in names:
        if not isinstance(raw, str):
            raw = str(raw)
        text = raw.strip(_STRIP)
        if not text:
            continue
        table_part, dot, col_part = text.rpartition(".")
        if dot:
            _match_dotted(table_part.strip(_STRIP), col_part.strip(_STRIP), schema, fuzzy, out)
        else:
            _match_bare(text, schema, fuzzy, out)
    return out


def _closest(word: str, options: list[str], cutoff: float = FUZZY_CUTOFF) -> str | None:
    lowered = {o.lower(): o for o in options}
    hit = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=cutoff)
    return lowered[hit[0]] if hit else None


def _match_dotted(
    table_name: str, col_name: str, schema: Schema, fuzzy: bool, out: LinkedSchema
) -> None:
    table = schema.find_table(table_name)
    if table is None and fuzzy:
        guess = _closest(table_name, schema.table_names)
        table = schema.find_table(guess) if guess else None
    if table is None:
        # The model may have invented the table but named a real column: treat it as bare.
        _match_bare(col_name, schema, fuzzy, out, tables_too=False)
        return
    column = table.column(col_name)
    if column is None and fuzzy:
        guess = _closest(col_name, table.column_names, TABLE_FUZZY_CUTOFF)
        column = table.column(guess) if guess else None
    if column is not None:
        out.columns.add((table.name, column.name))
    elif col_name == "" or col_name == "*":
        out.tables.add(table.name)
    else:
        logger.debug("link: %s has no column like %r", table.name, col_name)


def _match_bare(
    name: str, schema: Schema, fuzzy: bool, out: LinkedSchema, tables_too: bool = True
) -> None:
    key = name.lower()
    exact = [(t.name, c.name) for t, c in schema.all_columns() if c.name.lower() == key]
    if exact:
        out.columns.update(exact)
        return
    table = schema.find_table(name) if tables_too else None
    if table is not None:
        out.tables.add(table.name)
        return
    if not fuzzy:
        return
    guess = _closest(name, sorted({c.name for _, c in schema.all_columns()}))
    if guess is not None:
        g = guess.lower()
        out.columns.update((t.name, c.name) for t, c in schema.all_columns() if c.name.lower() == g)


def parse_link_output(output: Any, schema: Schema) -> LinkedSchema:
    """Linked names from whatever the LM returned: a list, a string holding one, or prose.

    Never raises: output with no recognisable name gives an empty link (and a warning).
    """
    if isinstance(output, str):
        items: list[Any] = [m.group(0) for m in _RAW_NAME.finditer(output)]
        # Words of free prose only count when they are exact schema names.
        linked = match_names([i for i in items if "." in i], schema)
        linked |= match_names([i for i in items if "." not in i], schema, fuzzy=False)
    elif isinstance(output, Iterable):
        linked = match_names(output, schema)
    else:
        linked = LinkedSchema()
    if not linked:
        logger.warning("schema linking: no schema names in LM output %r", str(output)[:200])
    return linked


class ForwardLinker(dspy.Module):
    """RSL-SQL forward linking: one LM call lists the needed columns, matched to the schema.

    It links before any draft exists and reads none (``links_forward``, not ``links_backward``:
    :data:`sqlweave.programs.stages.CAPABILITIES`).
    """

    links_forward = True
    links_backward = False

    def __init__(self) -> None:
        super().__init__()
        self.link = dspy.Predict(LinkSchema)

    def forward(
        self,
        question: str,
        schema: Schema,
        db_schema: str | None = None,
        evidence: str = "",
        dialect: str | None = None,
        sql: str = "",
        db: Any = None,
    ) -> dspy.Prediction:
        """Returns ``Prediction(linked=LinkedSchema, raw=list|str)``; ``db_schema`` is the text shown
        to the LM (default: the full DDL of ``schema``). ``sql`` and ``db`` (the linker protocol's
        draft and database, :mod:`sqlweave.programs.stages`) are not read: this link is forward."""
        text = db_schema if db_schema is not None else render_ddl(schema)
        try:
            out = self.link(
                dialect=dialect or schema.dialect,
                db_schema=text,
                question=question,
                evidence=evidence or "",
            )
            raw: Any = out.columns
        except AdapterParseError as err:
            raw = err.lm_response or ""
            logger.debug("link output not parsed as a list; matching names in raw text")
        return dspy.Prediction(linked=parse_link_output(raw, schema), raw=raw)


class BidirectionalLinker(dspy.Module):
    """RSL-SQL bidirectional linking: forward (LM) ∪ backward (draft SQL) ∪ evidence columns.

    Switches: ``use_forward``, ``use_backward``, ``use_evidence`` (the paper's forward-only and
    backward-only ablations). A forward link computed earlier (RSL uses it as a hint for the
    draft) is passed as ``forward_linked`` so the LM is not asked twice.
    """

    def __init__(
        self, use_forward: bool = True, use_backward: bool = True, use_evidence: bool = True
    ) -> None:
        super().__init__()
        self.use_forward = use_forward
        self.use_backward = use_backward
        self.use_evidence = use_evidence
        self.forward_linker = ForwardLinker()

    @property
    def links_forward(self) -> bool:
        """The stage capability: with ``use_forward`` its forward part (``forward_linker``) can
        link before a draft exists, and a forward link passed back as ``forward_linked`` is
        reused."""
        return self.use_forward

    def forward(
        self,
        question: str,
        schema: Schema,
        sql: str = "",
        db_schema: str | None = None,
        evidence: str = "",
        dialect: str | None = None,
        forward_linked: LinkedSchema | None = None,
        db: Any = None,
    ) -> dspy.Prediction:
        """Returns ``Prediction(linked, schema, forward, backward, evidence)``; ``schema`` is the
        pruned :class:`Schema` (the full one when nothing was linked). ``sql`` is the draft the
        backward link reads; ``db`` (the linker protocol's database) is not needed."""
        fwd = None
        if self.use_forward:
            fwd = forward_linked
            if fwd is None:
                fwd = self.forward_linker(
                    question=question,
                    schema=schema,
                    db_schema=db_schema,
                    evidence=evidence,
                    dialect=dialect,
                ).linked
        bwd = columns_in_sql(sql, schema) if self.use_backward and sql else None
        evd = columns_in_text(evidence, schema) if self.use_evidence and evidence else None
        linked = union(fwd, bwd, evd)
        return dspy.Prediction(
            linked=linked, schema=linked.subset(schema), forward=fwd, backward=bwd, evidence=evd
        )


# --- the linker stages without an LM call (the role's protocol: sqlweave.programs.stages) ----------


class NoLinker(dspy.Module):
    """No linking: the prompt keeps the whole schema (an empty link means "everything")."""

    is_noop = True

    def forward(self, question: str, schema: Schema, **_: Any) -> dspy.Prediction:
        return dspy.Prediction(linked=LinkedSchema(), schema=schema)


class DraftTablesLinker(dspy.Module):
    """PET-SQL's linking (§3.3): the tables a draft SQL reads, kept whole."""

    def forward(
        self, question: str, schema: Schema, sql: str = "", dialect: str | None = None, **_: Any
    ) -> dspy.Prediction:
        found = tables_in_sql(sql, schema, dialect) if sql else set()
        linked = LinkedSchema.from_tables(t.name for t in schema.tables if t.name in found)
        return dspy.Prediction(linked=linked, schema=linked.subset(schema))


class DraftColumnsLinker(dspy.Module):
    """RSL-SQL's backward linking alone: every column whose name occurs in the draft SQL."""

    def forward(self, question: str, schema: Schema, sql: str = "", **_: Any) -> dspy.Prediction:
        linked = columns_in_sql(sql, schema) if sql else LinkedSchema()
        return dspy.Prediction(linked=linked, schema=linked.subset(schema))


class ValueLinker(dspy.Module):
    """Value-based linking: the columns holding values the question names verbatim (the value
    retrieval of SEA-SQL and RSL-SQL), plus the tables the draft reads.

    Needs the database (``db``) for its :class:`~sqlweave.values.ValueIndex`; without one, or when
    nothing matches, it falls back to the draft's tables (and then to the whole schema).
    """

    def forward(
        self,
        question: str,
        schema: Schema,
        sql: str = "",
        dialect: str | None = None,
        db: Any = None,
        **_: Any,
    ) -> dspy.Prediction:
        columns: set[tuple[str, str]] = set()
        if db is not None:
            from sqlweave.values import ValueIndex

            # ValueIndex.build keeps one index per database (memory, then disk).
            columns = {(m[0], m[1]) for m in ValueIndex.build(db).mentioned(question)}
        tables = tables_in_sql(sql, schema, dialect) if sql else set()
        linked = LinkedSchema(tables=tables, columns=columns)
        return dspy.Prediction(linked=linked, schema=linked.subset(schema))
