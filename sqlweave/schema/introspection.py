"""Introspection: a database's catalog, sampled values and BIRD descriptions as a :class:`Schema`.

The catalog comes from the database's engine (:meth:`sqlweave.db.Database.reflect`: SQLAlchemy's
inspector, or the engine's own catalog queries); sampled values go through
:meth:`Database.execute`, so they obey the same read-only guard and timeouts as generated SQL.
Schemas are cached per database fingerprint and arguments. A scoped view
(:meth:`Database.scoped`) gets the whole schema, cached once, cut down to its tables.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from sqlweave.caches import CACHE
from sqlweave.db import Database, ExecutionError
from sqlweave.schema.descriptions import read_descriptions
from sqlweave.schema.model import Column, ForeignKey, Schema, Table
from sqlweave.schema.render import quote

logger = logging.getLogger(__name__)

_SAMPLE_TIMEOUT_S = 10.0

_CACHE: dict[tuple[Any, ...], Schema] = {}
_CACHE_LOCK = threading.Lock()
#: One lock per schema being introspected, so concurrent callers build it once.
_BUILDING: dict[tuple[Any, ...], threading.Lock] = {}


def introspect(
    db: Database,
    *,
    description_dir: str | Path | None = None,
    sample_rows: int = 5,
    distinct_values: int = 5,
) -> Schema:
    """Read the schema of ``db``: tables, columns, types, keys, descriptions and sample values.

    ``sample_rows`` first rows per table are kept (PET shows 3, Dubo v1 up to 5; renderers take
    what they need), and up to ``distinct_values`` distinct non-NULL values per column. BIRD
    descriptions are read from ``description_dir``, or from ``database_description/`` beside a
    SQLite file when that folder exists. Results are cached in memory per database fingerprint
    and arguments, so every program asking for the same schema pays once.
    """
    visible = db.visible_tables
    if visible is not None:
        # A scoped view (sqlweave.schema_filter.scoped): the whole schema, cached once, cut down.
        whole = introspect(
            unscoped(db),
            description_dir=description_dir,
            sample_rows=sample_rows,
            distinct_values=distinct_values,
        )
        view = whole.subset(tables=[t.name for t in whole.tables if t.name.lower() in visible])
        display = db.display_names
        return view.renamed(display) if display else view
    desc_dir = _description_dir(db, description_dir)
    key = (db.fingerprint, db.name, str(desc_dir), sample_rows, distinct_values)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            return hit
        building = _BUILDING.setdefault(key, threading.Lock())
    # Threads asking for the same schema at once wait for the first one instead of all reading
    # the catalog (no shared connection: Database gives each introspection call its own).
    with building:
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
        if hit is not None:
            return hit
        schema = _introspect(db, desc_dir, sample_rows, distinct_values)
        with _CACHE_LOCK:
            _CACHE[key] = schema
            _BUILDING.pop(key, None)
    return schema


def unscoped(db: Database) -> Database:
    """``db`` with every table visible again (a scoped view shares the real handle's state)."""
    return db.scoped(None)


def clear_cache() -> None:
    """Forget cached schemas (after a database file changed in place, or in tests)."""
    with _CACHE_LOCK:
        _CACHE.clear()


CACHE.register(clear_cache)


def _description_dir(db: Database, description_dir: str | Path | None) -> Path | None:
    if description_dir is not None:
        return Path(description_dir)
    if db.path is not None:
        candidate = db.path.parent / "database_description"
        if candidate.is_dir():
            return candidate
    return None


#: Reflected table: name, [(column, type text, kind)], primary key, [(columns, ref table, ref columns)].
_RawTable = tuple[
    str, list[tuple[str, str, str]], list[str], list[tuple[list[str], str, list[str]]]
]


def _introspect(
    db: Database, desc_dir: Path | None, sample_rows: int, distinct_values: int
) -> Schema:
    raw_tables = db.reflect()
    descriptions = read_descriptions(desc_dir, [t[0] for t in raw_tables]) if desc_dir else {}

    tables: list[Table] = []
    foreign_keys: list[ForeignKey] = []
    pk_of = {name: pk for name, _, pk, _ in raw_tables}
    # SQLite matches a foreign key's table without regard to case, and keeps one that names no
    # table at all: the schema keeps the table's own spelling, and drops a key to nothing.
    real_name = {name.lower(): name for name, _, _, _ in raw_tables}
    for name, raw_columns, pk, raw_fks in raw_tables:
        table_desc = descriptions.get(name.lower(), {})
        columns = []
        for col_name, type_text, kind in raw_columns:
            desc, value_desc = table_desc.get(col_name.lower(), ("", ""))
            samples = (
                _distinct_values(db, name, col_name, distinct_values) if distinct_values else []
            )
            columns.append(
                Column(
                    name=col_name,
                    type=type_text,
                    description=desc,
                    value_description=value_desc,
                    samples=samples,
                    kind=kind,
                )
            )
        rows = _sample_rows(db, name, [c.name for c in columns], sample_rows) if sample_rows else []
        tables.append(Table(name=name, columns=columns, primary_key=list(pk), sample_rows=rows))
        for cols, written, ref_cols in raw_fks:
            ref_table = real_name.get(written.lower())
            if ref_table is None:
                logger.debug("%s: a foreign key of %s names no table (%s)", db.name, name, written)
                continue
            # `REFERENCES t` without columns means t's primary key.
            ref_cols = ref_cols or pk_of.get(ref_table, [])
            for col, ref_col in zip(cols, ref_cols, strict=False):
                foreign_keys.append(ForeignKey(name, col, ref_table, ref_col))
    schema = Schema(db_id=db.name, dialect=db.dialect, tables=tables, foreign_keys=foreign_keys)
    logger.debug(
        "introspected %s: %d tables, %d columns, %d foreign keys",
        db.name,
        len(tables),
        sum(len(t.columns) for t in tables),
        len(foreign_keys),
    )
    return schema


def _distinct_values(db: Database, table: str, column: str, k: int) -> list[Any]:
    sql = (
        f"SELECT DISTINCT {quote(column)} FROM {quote(table)} "
        f"WHERE {quote(column)} IS NOT NULL LIMIT {int(k)}"
    )
    try:
        result = db.execute(sql, timeout_s=_SAMPLE_TIMEOUT_S, max_rows=k, use_cache=False)
    except ExecutionError as err:
        logger.warning("cannot sample %s.%s in %s: %s", table, column, db.name, err)
        return []
    return [row[0] for row in result.rows]


def _sample_rows(db: Database, table: str, columns: list[str], k: int) -> list[tuple[Any, ...]]:
    if not columns:
        return []
    # Explicit columns, not *, so rows stay aligned with the introspected column order.
    sql = f"SELECT {', '.join(quote(c) for c in columns)} FROM {quote(table)} LIMIT {int(k)}"
    try:
        result = db.execute(sql, timeout_s=_SAMPLE_TIMEOUT_S, max_rows=k, use_cache=False)
    except ExecutionError as err:
        logger.warning("cannot sample rows of %s in %s: %s", table, db.name, err)
        return []
    return list(result.rows)
