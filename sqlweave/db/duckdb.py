"""DuckDB: files opened ``read_only`` without external access, queries stopped by ``interrupt()``.

Layer 2 here: the file is opened read-only with external access off and the configuration
locked, and DuckDB's own parser must find exactly one ``SELECT`` in the text. Layer 3: a memory
limit for the handle (:data:`DUCKDB_MEMORY_LIMIT`), and the watchdog's ``interrupt()`` at the
deadline, armed while rows are fetched too (DuckDB streams results, so most of a large result's
time is spent fetching). The memory limit does not cover string heaps: see docs/security.md.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from sqlweave.db.engine import Engine, Fetched
from sqlweave.db.errors import ExecutionError, classify_error, first_line, not_found
from sqlweave.db.fetch import fetch
from sqlweave.db.reflect import RawTable, kind_from_text
from sqlweave.db.watchdog import WATCHDOG, RunningQueries

#: DuckDB's own memory limit for one database handle.
DUCKDB_MEMORY_LIMIT = "1GB"


class DuckDBEngine(Engine):
    """A DuckDB file reached through duckdb_engine's SQLAlchemy pool."""

    dialect = "duckdb"

    def __init__(self, url: str, path: Path, sa_engine: sa.Engine) -> None:
        super().__init__(url, path.stem, path, sa_engine)
        self._running = RunningQueries()

    @classmethod
    def open(cls, url: sa.URL, *, allow_superuser: bool = False) -> DuckDBEngine:
        path = Path(url.database or "")
        if not path.is_file():
            raise not_found("DuckDB", path, "duckdb")
        try:
            # read_only keeps the file intact; without external access a query can neither read
            # nor write other files (COPY ... TO, read_csv, ATTACH), and the lock stops it from
            # switching that back on.
            config = {
                "enable_external_access": False,
                "memory_limit": DUCKDB_MEMORY_LIMIT,
                # No spilling: the memory limit is a query's limit, not a folder of GBs
                # written beside the database file.
                "temp_directory": "",
                "lock_configuration": True,
            }
            engine = sa.create_engine(url, connect_args={"read_only": True, "config": config})
            with engine.connect():
                pass
        except ModuleNotFoundError as err:
            raise ExecutionError(
                "connection", "DuckDB needs: pip install 'sqlweave[duckdb]'"
            ) from err
        except Exception as err:  # duckdb's errors have no base class importable without it
            orig = getattr(err, "orig", None) or err
            raise ExecutionError(
                "connection", f"cannot open DuckDB database {path}: {first_line(str(orig))}"
            ) from err
        return cls(str(url), path, engine)

    def run(
        self, sql: str, deadline: float, max_rows: int | None, max_bytes: int | None
    ) -> Fetched:
        try:
            with self.raw_connection() as raw:
                token = WATCHDOG.arm(deadline, raw.interrupt)
                try:
                    _ensure_one_select(raw, sql)
                    cursor = raw.cursor()
                    try:
                        with self._running.stoppable(raw.interrupt, sql):
                            cursor.execute(sql)
                            columns = tuple(d[0] for d in cursor.description or ())
                            rows, truncated = fetch(cursor, max_rows, max_bytes, deadline)
                    finally:
                        cursor.close()
                finally:
                    WATCHDOG.disarm(token)
                    # setseed() would otherwise fix random() for every later query on this
                    # pooled connection; a fresh seed from outside undoes it.
                    raw.execute("SELECT setseed(?)", [random.uniform(-1.0, 1.0)])
        except ExecutionError:
            raise
        except Exception as err:
            orig = getattr(err, "orig", None) or err
            text = first_line(str(orig))
            raise ExecutionError(classify_error(text), text, sql) from err
        return columns, rows, truncated

    def interrupt(self) -> None:
        """``interrupt()`` every running query's connection."""
        self._running.stop_all()

    def reflect(self) -> list[RawTable]:
        """DuckDB through its own catalog functions: duckdb_engine's inspector queries pg_catalog
        tables that current DuckDB releases no longer emulate."""
        with self.raw_connection() as raw:
            cursor = raw.cursor()
            scope = "table_schema = current_schema() AND table_catalog = current_database()"
            cursor.execute(
                "SELECT table_name FROM information_schema.tables "
                f"WHERE {scope} AND table_type = 'BASE TABLE' ORDER BY table_name"
            )
            return [_reflect_table(cursor, name, scope) for (name,) in cursor.fetchall()]


def _ensure_one_select(raw: Any, sql: str) -> None:
    """DuckDB's cursor runs every statement in the text; the engine's own parser makes sure
    there is exactly one, and that it is a query. PIVOT expands to several internally (DuckDB
    reports MULTI), still reads only."""
    statements = raw.extract_statements(sql)
    kinds = [getattr(s.type, "name", str(s.type)) for s in statements]
    if kinds != ["SELECT"] and not (kinds == ["MULTI"] and re.match(r"\s*PIVOT\b", sql, re.I)):
        raise ExecutionError(
            "not_read_only", f"only one SELECT may run, got {kinds or 'nothing'}", sql
        )


def _reflect_table(cursor: Any, name: str, scope: str) -> RawTable:
    cursor.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        f"WHERE {scope} AND table_name = ? ORDER BY ordinal_position",
        [name],
    )
    columns = [(c, t, kind_from_text(t)) for c, t in cursor.fetchall()]
    cursor.execute(
        "SELECT constraint_type, constraint_column_names, referenced_table, "
        "referenced_column_names FROM duckdb_constraints() "
        "WHERE schema_name = current_schema() AND database_name = current_database() "
        "AND table_name = ? ORDER BY constraint_index",
        [name],
    )
    pk: list[str] = []
    fks = []
    for kind, cols, ref_table, ref_cols in cursor.fetchall():
        if kind == "PRIMARY KEY":
            pk = list(cols)
        elif kind == "FOREIGN KEY":
            fks.append((list(cols), ref_table, list(ref_cols or [])))
    return (name, columns, pk, fks)
