"""Copy a bundled SQLite database into PostgreSQL or DuckDB, so the same benchmark runs on them.

SQLite's typing is per value, not per column, and Spider's databases use that freedom: text in
``INTEGER`` columns, reals in integer columns, columns declared with no type at all. A column's
target type is therefore chosen from the *storage classes its values actually have*, which keeps
SQLite's arithmetic (an integer column still divides as integers):

========================================  ====================================================
values found in the column                target type
========================================  ====================================================
only integers                             ``BIGINT``
integers and reals                        ``DOUBLE PRECISION``
any text (with or without numbers)        ``TEXT`` (numbers written as SQLite would print them)
only blobs                                ``BYTEA`` / ``BLOB``
no values at all                          from the declared type's SQLite affinity
========================================  ====================================================

What a copy does not keep (found by review; none occurs in the bundled databases): an integer
beyond 2^53 in a column that also holds reals (it becomes a double), the exact text SQLite prints
for some reals in a text column (``100.0`` is written ``100``), a blob in a text column that is
no UTF-8, generated columns and views. PostgreSQL also refuses text holding a NUL and two column
names alike in their first 63 characters: such a copy fails and rolls back.

Identifiers are lower-cased: SQLite matches them case-insensitively, PostgreSQL folds unquoted
ones to lower case, so lower-case tables and columns let SQL transpiled by sqlglot resolve.
:func:`to_postgres_sql` does the matching rewrite of a query's identifiers.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import sqlglot
from sqlglot import exp

logger = logging.getLogger(__name__)

_SAFE_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class ColumnPlan:
    """How one SQLite column is recreated: its new name, target type and why."""

    source: str
    name: str
    kind: str  # integer | real | text | blob
    declared: str = ""
    storage: tuple[str, ...] = ()

    @property
    def fell_back(self) -> bool:
        """True when the values forced a wider type than the declared affinity suggests."""
        return self.kind == "text" and _affinity(self.declared) in ("integer", "real", "numeric")


@dataclass(frozen=True)
class TablePlan:
    """A SQLite table and the columns it becomes."""

    source: str
    name: str
    columns: tuple[ColumnPlan, ...] = field(default_factory=tuple)


def _affinity(declared: str) -> str:
    """SQLite's column affinity rules (https://sqlite.org/datatype3.html, section 3.1)."""
    t = declared.upper()
    if "INT" in t:
        return "integer"
    if any(s in t for s in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if not t or "BLOB" in t:
        return "blob"
    if any(s in t for s in ("REAL", "FLOA", "DOUB")):
        return "real"
    return "numeric"


def _choose_kind(declared: str, storage: set[str]) -> str:
    storage = storage - {"null"}
    if not storage:
        return {"integer": "integer", "real": "real", "numeric": "real", "blob": "text"}.get(
            _affinity(declared), "text"
        )
    if storage == {"integer"}:
        return "integer"
    if storage <= {"integer", "real"}:
        return "real"
    if storage == {"blob"}:
        return "blob"
    return "text"


def _unique_lower(names: Iterable[str]) -> list[str]:
    """Lower-cased names, suffixed where two differ only in case (SQLite forbids that anyway)."""
    out: list[str] = []
    seen: set[str] = set()
    for name in names:
        new = name.lower()
        n = 2
        while new in seen:
            new = f"{name.lower()}_{n}"
            n += 1
        seen.add(new)
        out.append(new)
    return out


def _sqlite_ro(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise FileNotFoundError(f"SQLite database not found: {path}")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    conn.text_factory = lambda raw: raw.decode("utf-8", errors="replace")
    return conn


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def plan_tables(sqlite_path: str | Path) -> list[TablePlan]:
    """Inspect a SQLite file and decide each table's and column's name and type elsewhere."""
    with _sqlite_ro(Path(sqlite_path)) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
            )
        ]
        plans = []
        for table, new_table in zip(tables, _unique_lower(tables), strict=True):
            info = conn.execute(f"PRAGMA table_info({_q(table)})").fetchall()
            names = [row[1] for row in info]
            columns = []
            for (_, col, declared, *_), new_col in zip(info, _unique_lower(names), strict=True):
                storage = {
                    r[0]
                    for r in conn.execute(f"SELECT DISTINCT typeof({_q(col)}) FROM {_q(table)}")
                }
                kind = _choose_kind(declared or "", storage)
                columns.append(
                    ColumnPlan(col, new_col, kind, declared or "", tuple(sorted(storage)))
                )
            plans.append(TablePlan(table, new_table, tuple(columns)))
    for plan in plans:
        for col in plan.columns:
            if col.fell_back:
                logger.info(
                    "%s.%s declared %r holds %s: copied as TEXT",
                    plan.source,
                    col.source,
                    col.declared,
                    "/".join(col.storage),
                )
    return plans


def _sqlite_text(value: Any) -> str | None:
    """A value as SQLite's CAST(x AS TEXT) would print it."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") and "e" not in text else text
    return str(value)


def _converter(kind: str) -> Any:
    if kind == "text":
        return _sqlite_text
    if kind == "real":
        return lambda v: None if v is None else float(v)
    return lambda v: v


def _rows(
    conn: sqlite3.Connection, plan: TablePlan, chunk_size: int
) -> Iterator[list[tuple[Any, ...]]]:
    converters = [_converter(c.kind) for c in plan.columns]
    cols = ", ".join(_q(c.source) for c in plan.columns)
    cursor = conn.execute(f"SELECT {cols} FROM {_q(plan.source)}")
    while chunk := cursor.fetchmany(chunk_size):
        yield [tuple(f(v) for f, v in zip(converters, row, strict=True)) for row in chunk]


def default_schema_name(sqlite_path: str | Path) -> str:
    """The schema a database is copied into: its ``db_id`` (the file's stem), lower-cased."""
    return Path(sqlite_path).stem.lower()


_PG_TYPES = {
    "integer": "BIGINT",
    "real": "DOUBLE PRECISION",
    "text": "TEXT",
    "blob": "BYTEA",
}


def copy_sqlite_to_postgres(
    sqlite_path: str | Path,
    pg_url: str,
    *,
    schema_name: str | None = None,
    read_url: str | None = None,
    readers: Sequence[str] = (),
    chunk_size: int = 5_000,
) -> str:
    """Copy every table of a SQLite file into its own PostgreSQL schema; return a URL to query it.

    The schema (default: the file's stem, i.e. the Spider ``db_id``, lower-cased) is dropped and
    recreated, so a second call gives the same result. Rows go in through ``COPY``. Constraints are
    not copied: Spider's data breaks its own foreign keys, and queries need none.

    ``pg_url`` must be allowed to create schemas. The returned URL is ``read_url`` (default
    ``pg_url``) with ``options=-csearch_path=<schema>``, so unqualified table names resolve;
    ``readers`` are roles granted ``USAGE`` on the schema and ``SELECT`` on its tables.
    """
    plans = plan_tables(sqlite_path)
    schema = schema_name or default_schema_name(sqlite_path)
    url = _psycopg_url(pg_url)
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            with raw.cursor() as cur, _sqlite_ro(Path(sqlite_path)) as src:
                cur.execute(f"DROP SCHEMA IF EXISTS {_q(schema)} CASCADE")
                cur.execute(f"CREATE SCHEMA {_q(schema)}")
                for plan in plans:
                    target = f"{_q(schema)}.{_q(plan.name)}"
                    cols = ", ".join(f"{_q(c.name)} {_PG_TYPES[c.kind]}" for c in plan.columns)
                    cur.execute(f"CREATE TABLE {target} ({cols})")
                    names = ", ".join(_q(c.name) for c in plan.columns)
                    with cur.copy(f"COPY {target} ({names}) FROM STDIN") as copy:
                        for chunk in _rows(src, plan, chunk_size):
                            for row in chunk:
                                copy.write_row(row)
                    cur.execute(f"ANALYZE {target}")
                for role in readers:
                    cur.execute(f"GRANT USAGE ON SCHEMA {_q(schema)} TO {_q(role)}")
                    cur.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {_q(schema)} TO {_q(role)}")
            raw.commit()
    finally:
        engine.dispose()
    logger.info("copied %s (%d tables) into schema %s", sqlite_path, len(plans), schema)
    return search_path_url(read_url or pg_url, schema)


def search_path_url(pg_url: str, schema: str) -> str:
    """``pg_url`` with ``options=-csearch_path=<schema>`` (libpq passes it to the server)."""
    url = sa.engine.make_url(pg_url)
    # A name PostgreSQL would fold or split (capitals, spaces, punctuation) is double-quoted:
    # MyShop unquoted is the schema myshop. libpq's options value is backslash-escaped, so a
    # space needs "\ " even inside the quotes.
    if not re.fullmatch(r"[a-z_][a-z0-9_$]*", schema):
        schema = '"' + schema.replace('"', '""') + '"'
    value = "-csearch_path=" + schema.replace("\\", "\\\\").replace(" ", "\\ ")
    url = url.update_query_dict({"options": value})
    return url.render_as_string(hide_password=False)


def _psycopg_url(pg_url: str) -> sa.URL:
    url = sa.engine.make_url(pg_url)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url


_DUCKDB_TYPES = {"integer": "BIGINT", "real": "DOUBLE", "text": "VARCHAR", "blob": "BLOB"}


def copy_sqlite_to_duckdb(
    sqlite_path: str | Path, duckdb_path: str | Path, *, chunk_size: int = 5_000
) -> Path:
    """Copy every table of a SQLite file into a new DuckDB file (replaced if it exists).

    Types follow the same rules as :func:`copy_sqlite_to_postgres`. Returns the DuckDB path, which
    :meth:`sqlweave.db.Database.open` accepts as ``duckdb:///<path>``.
    """
    import duckdb  # optional dependency: sqlweave[duckdb]

    plans = plan_tables(sqlite_path)
    target = Path(duckdb_path)
    if target.resolve() == Path(sqlite_path).resolve():  # it would delete its own source
        raise ValueError(f"the DuckDB copy of {sqlite_path} cannot be written over it")
    target.parent.mkdir(parents=True, exist_ok=True)
    # built beside the target and moved in when complete: a failed copy leaves the old one
    partial = target.with_name(f".{target.name}.partial")
    for stale in (partial, partial.with_name(partial.name + ".wal")):
        stale.unlink(missing_ok=True)
    con = duckdb.connect(str(partial))
    try:
        with _sqlite_ro(Path(sqlite_path)) as src:
            for plan in plans:
                cols = ", ".join(f"{_q(c.name)} {_DUCKDB_TYPES[c.kind]}" for c in plan.columns)
                con.execute(f"CREATE TABLE {_q(plan.name)} ({cols})")
                marks = ", ".join("?" for _ in plan.columns)
                for chunk in _rows(src, plan, chunk_size):
                    con.executemany(f"INSERT INTO {_q(plan.name)} VALUES ({marks})", chunk)
        con.execute("CHECKPOINT")
    except BaseException:
        con.close()
        partial.unlink(missing_ok=True)
        raise
    con.close()
    target.with_name(target.name + ".wal").unlink(missing_ok=True)
    os.replace(partial, target)
    return target


def to_postgres_sql(
    sql: str,
    *,
    columns: Iterable[str] | None = None,
    read: str = "sqlite",
    write: str = "postgres",
) -> str:
    """Transpile a SQLite query for PostgreSQL, lower-casing identifiers as the copy does.

    SQLite compares identifiers case-insensitively, quoted or not; the copied tables have
    lower-case names, so every identifier (quoted ones too) is lower-cased before generating.
    SQLite also reads a double-quoted word that names no column as a string (``name = "Kyle"``,
    common in Spider's gold SQL); given the database's ``columns``, such an unqualified quoted
    column becomes a string literal, as SQLite would read it. Raises
    :class:`sqlglot.errors.ParseError` when sqlglot cannot read the query.
    """
    known = {c.lower() for c in columns} if columns is not None else None
    tree = sqlglot.parse_one(sql, read=read)

    def rewrite(node: exp.Expression) -> exp.Expression:
        if (
            known is not None
            and isinstance(node, exp.Column)
            and not node.table
            and isinstance(node.this, exp.Identifier)
            and node.this.quoted
            and node.name.lower() not in known
        ):
            return exp.Literal.string(node.name)
        if isinstance(node, exp.Identifier):
            return exp.Identifier(this=node.name.lower(), quoted=node.quoted)
        return node

    return tree.transform(rewrite).sql(dialect=write)


def column_names(plans: Iterable[TablePlan]) -> set[str]:
    """Every column name (source and copied spelling) of planned tables, for :func:`to_postgres_sql`."""
    return {n for plan in plans for c in plan.columns for n in (c.source, c.name)}
