"""The schema model: tables, columns, keys, and the linked subsets the renderers show.

Treat every object here as immutable: :func:`sqlweave.schema.introspect` hands out shared cached
copies, and every helper returns a new object.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

logger = logging.getLogger(__name__)

#: A linked schema: ``{table: [columns]}``, where ``None`` keeps every column of that table.
SubsetSpec = Mapping[str, Sequence[str] | None]


@dataclass(frozen=True)
class Column:
    """One column. ``kind`` is a coarse type class (text, number, date, boolean, blob, other,
    unknown) for rules that must know whether MIN/MAX or string matching makes sense."""

    name: str
    type: str = ""
    description: str = ""
    value_description: str = ""
    samples: list[Any] = field(default_factory=list)
    kind: str = "unknown"


@dataclass(frozen=True)
class Table:
    """One table. ``sample_rows`` are the first rows of the table, aligned with ``columns``."""

    name: str
    columns: list[Column]
    primary_key: list[str] = field(default_factory=list)
    description: str = ""
    sample_rows: list[tuple[Any, ...]] = field(default_factory=list)

    def column(self, name: str) -> Column | None:
        """The column called ``name``, compared case-insensitively and without quotes."""
        key = _norm(name)
        return next((c for c in self.columns if c.name.lower() == key), None)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


@dataclass(frozen=True)
class ForeignKey:
    """``table.column`` references ``ref_table.ref_column`` (one pair per column of a composite key)."""

    table: str
    column: str
    ref_table: str
    ref_column: str


@dataclass(frozen=True)
class Schema:
    """A database schema. Treat it as immutable: :func:`introspect` hands out a shared cached copy,
    and every helper here returns a new object."""

    db_id: str
    dialect: str
    tables: list[Table]
    foreign_keys: list[ForeignKey] = field(default_factory=list)

    # -- lookup ---------------------------------------------------------------------------------

    def find_table(self, name: str) -> Table | None:
        """The table called ``name``: case-insensitive, tolerant of quotes and backticks."""
        key = _norm(name)
        return next((t for t in self.tables if t.name.lower() == key), None)

    def find_column(self, table: str, name: str) -> Column | None:
        """The column ``name`` of ``table`` (both case-insensitive), or None."""
        found = self.find_table(table)
        return found.column(name) if found is not None else None

    def all_columns(self) -> list[tuple[Table, Column]]:
        """Every (table, column) pair in schema order, for linking and name-repair rules."""
        return [(t, c) for t in self.tables for c in t.columns]

    @property
    def table_names(self) -> list[str]:
        return [t.name for t in self.tables]

    # -- linked subsets ---------------------------------------------------------------------------

    def renamed(self, names: Mapping[str, str]) -> Schema:
        """The same schema with tables renamed (``names``: old name, lower-cased -> new name),
        foreign keys following; names not in ``names`` stay."""

        def new(name: str) -> str:
            return names.get(name.lower(), name)

        return replace(
            self,
            tables=[replace(t, name=new(t.name)) for t in self.tables],
            foreign_keys=[
                replace(fk, table=new(fk.table), ref_table=new(fk.ref_table))
                for fk in self.foreign_keys
            ],
        )

    def subset(
        self,
        spec: SubsetSpec | None = None,
        *,
        tables: Iterable[str] | None = None,
        columns: Iterable[str | tuple[str, str]] | None = None,
        keep_keys: bool = True,
    ) -> Schema:
        """A new schema holding only the linked tables and columns.

        ``spec`` maps tables to columns (``None`` = all); ``tables`` adds whole tables; ``columns``
        adds ``"table.column"`` strings or ``(table, column)`` pairs. Names match
        case-insensitively and unknown names are ignored, because they usually come from an LM
        or a draft SQL. With ``keep_keys`` the primary keys of kept tables and the columns of
        foreign keys between kept tables stay too: without them no join can be written. Order
        follows the database, not the request, so prompts stay stable.
        """
        wanted = _Wanted(self)
        for table_name, cols in (spec or {}).items():
            wanted.add(table_name, None if cols is None else list(cols))
        for table_name in tables or ():
            wanted.add(table_name, None)
        for item in columns or ():
            if isinstance(item, str):
                table_name, _, col = item.rpartition(".")
            else:
                table_name, col = item
            wanted.add(table_name, [col])
        kept_fks = [
            fk
            for fk in self.foreign_keys
            if fk.table in wanted.columns and fk.ref_table in wanted.columns
        ]
        if keep_keys:
            wanted.add_keys(kept_fks)
        new_tables = [
            _cut(t, wanted.columns[t.name]) for t in self.tables if t.name in wanted.columns
        ]
        kept_cols = {(t.name, c.name) for t in new_tables for c in t.columns}
        new_fks = [
            fk
            for fk in kept_fks
            if (fk.table, fk.column) in kept_cols and (fk.ref_table, fk.ref_column) in kept_cols
        ]
        return replace(self, tables=new_tables, foreign_keys=new_fks)


class _Wanted:
    """What :meth:`Schema.subset` keeps: real table name -> column names (None: every column)."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self.columns: dict[str, set[str] | None] = {}

    def add(self, table_name: str, column_names: Iterable[str] | None) -> None:
        table = self.schema.find_table(table_name)
        if table is None:
            logger.debug("subset: no table %r in %s", table_name, self.schema.db_id)
            return
        if column_names is None:
            self.columns[table.name] = None
            return
        current = self.columns.setdefault(table.name, set())
        if current is None:
            return
        for col in column_names:
            found = table.column(col)
            if found is None:
                logger.debug("subset: no column %r in %s.%s", col, self.schema.db_id, table.name)
            else:
                current.add(found.name)

    def add_keys(self, kept_fks: list[ForeignKey]) -> None:
        """Primary keys of kept tables, and both ends of foreign keys between them."""
        for table in self.schema.tables:
            cols = self.columns.get(table.name, None)
            if table.name in self.columns and cols is not None:
                cols.update(table.primary_key)
        for fk in kept_fks:
            for name, col in ((fk.table, fk.column), (fk.ref_table, fk.ref_column)):
                cols = self.columns[name]
                if cols is not None:
                    cols.add(col)


def _cut(table: Table, cols: set[str] | None) -> Table:
    """``table`` with only ``cols`` (None: the table as it is), its sample rows aligned."""
    if cols is None:
        return table
    idx = [i for i, c in enumerate(table.columns) if c.name in cols]
    return replace(
        table,
        columns=[table.columns[i] for i in idx],
        primary_key=[k for k in table.primary_key if k in cols],
        sample_rows=[tuple(row[i] for i in idx) for row in table.sample_rows],
    )


def _norm(name: str) -> str:
    """Lower-case a name and strip the quoting an LM or sqlglot may leave on it."""
    name = name.strip()
    if len(name) >= 2 and name[0] + name[-1] in ('""', "``", "[]", "''"):
        name = name[1:-1]
    return name.lower()


def _apply(schema: Schema, subset: SubsetSpec | Schema | None) -> Schema:
    if subset is None:
        return schema
    if isinstance(subset, Schema):
        return subset
    return schema.subset(subset)
