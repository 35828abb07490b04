"""The engine protocol: what :class:`~sqlweave.db.Database` asks of SQLite, PostgreSQL, DuckDB.

``Database`` holds the parts every engine shares (the read-only policy, the result cache, table
scopes, error wording); an :class:`Engine` holds one open database of one kind and knows how to
run a query on it before a deadline, stop what runs, and read its catalog. A new engine is one
module with an ``Engine`` subclass plus one line in :data:`ENGINES` (or, at run time,
``ENGINES.register("scheme", MyEngine)``); ``Database.open("scheme://...")`` then opens it:

```python
class MyEngine(Engine):
    dialect = "sqlite"                       # the sqlglot dialect its SQL is checked in
    @classmethod
    def open(cls, url, *, allow_superuser=False): ...
    def run(self, sql, deadline, max_rows, max_bytes): ...   # (columns, rows, truncated)
    def interrupt(self): ...
    def reflect(self): ...   # [(table, [(column, type, kind)], pk, fks)]; SQLAlchemy's by default

ENGINES.register("mine", MyEngine)
```
"""

from __future__ import annotations

import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from sqlweave.db.errors import ExecutionError
from sqlweave.db.reflect import RawTable, reflect_sqlalchemy
from sqlweave.namecase import CaseNames
from sqlweave.registry import Registry

logger = logging.getLogger(__name__)

#: What :meth:`Engine.run` returns: column names, rows, whether a cap cut the rows short.
Fetched = tuple[tuple[str, ...], tuple[tuple[Any, ...], ...], bool]


#: Seconds before a folding engine reads a catalog again after a read failed
#: (:meth:`Engine.case_names`).
CATALOG_RETRY_S = 30.0


class Engine(ABC):
    """One open database of one kind, able to run untrusted read-only queries on it.

    Every engine enforces layers 2 and 3 of ``sqlweave.db``'s guard in its own terms: the engine
    refuses writes, and :meth:`run` stops by ``deadline`` whether the time goes to running or to
    fetching rows (:func:`sqlweave.db.fetch.fetch` looks at the clock between chunks). Layer 1,
    the query check, runs before :meth:`run` is called.
    """

    #: sqlglot's name for the SQL this engine speaks; ``Database.dialect`` and the query check use it.
    dialect: str = ""
    #: The query listing ``(CREATE statement, table name)`` when the engine keeps its tables'
    #: DDL text (SQLite's ``sqlite_master``), else None: prompts then show rendered DDL.
    ddl_query: str | None = None
    #: Whether the engine reads an unquoted name as its lower-case form (PostgreSQL does), so a
    #: name with capitals must be quoted: ``Database`` then quotes such names in the queries it
    #: runs (:meth:`case_names`, :func:`sqlweave.namecase.fit_case`).
    folds_unquoted_names: bool = False

    def __init__(
        self, url: str, default_name: str, path: Path | None = None, sa_engine: Any = None
    ) -> None:
        self.url = url
        self.default_name = default_name
        self.path = path
        self.sa_engine: sa.Engine | None = sa_engine

    @classmethod
    @abstractmethod
    def open(cls, url: sa.URL, *, allow_superuser: bool = False) -> Engine:
        """Open ``url``; raise :class:`ExecutionError` (kind ``connection``) when it cannot be."""

    @abstractmethod
    def run(
        self, sql: str, deadline: float, max_rows: int | None, max_bytes: int | None
    ) -> Fetched:
        """Run one checked query and fetch its rows, all before ``deadline`` (``time.monotonic()``).

        Raises :class:`ExecutionError`; a deadline that passes gives kind ``timeout``.
        """

    @abstractmethod
    def interrupt(self) -> None:
        """Stop every query running now (from any thread); each raises kind ``connection``."""

    def case_names(self) -> CaseNames:
        """The names an unquoted spelling cannot reach here (:class:`~sqlweave.namecase.CaseNames`),
        read from the catalog on first use and kept; none on an engine that does not fold names.

        A catalog that cannot be read (a server restarting, a lost connection) fits nothing:
        queries run as written. That is not kept for good: the read is tried again once
        :data:`CATALOG_RETRY_S` have passed, so one failure at start-up does not leave a
        long-running server without the fitting, nor is every query slowed by a catalog read
        that keeps failing."""
        known: CaseNames | None = getattr(self, "_case_names", None)
        if known is not None:
            return known
        if not self.folds_unquoted_names:
            self._case_names = CaseNames()
            return self._case_names
        failed_at: float | None = getattr(self, "_catalog_failed_at", None)
        if failed_at is not None and time.monotonic() - failed_at < CATALOG_RETRY_S:
            return CaseNames()
        try:
            self._case_names = CaseNames.of(self.reflect())
        except Exception as err:  # noqa: BLE001 - a catalog we cannot read fits nothing
            logger.debug("no catalog to fit name case with (tried again later): %s", err)
            self._catalog_failed_at = time.monotonic()
            return CaseNames()
        return self._case_names

    def reflect(self) -> list[RawTable]:
        """Tables, columns, keys from the engine's catalog, for :func:`sqlweave.schema.introspect`
        (by default through SQLAlchemy's inspector)."""
        if self.sa_engine is None:
            raise NotImplementedError(f"{type(self).__name__} has no catalog to reflect")
        return reflect_sqlalchemy(self.sa_engine)

    @contextlib.contextmanager
    def raw_connection(self) -> Iterator[Any]:
        """The driver's own connection (DB-API), checked out of ``sa_engine``'s pool for one
        query: engines reach past SQLAlchemy for cursors, cancels and interrupts."""
        if self.sa_engine is None:
            raise NotImplementedError(f"{type(self).__name__} has no SQLAlchemy engine")
        with self.sa_engine.connect() as conn:
            yield conn.connection.dbapi_connection

    @property
    def open_connections(self) -> int:
        """Connections held open now for untrusted queries (engines with a pool of their own)."""
        return 0

    def close(self) -> None:
        """Stop running queries and close every connection."""
        self.interrupt()
        if self.sa_engine is not None:
            self.sa_engine.dispose()


def _unsupported(name: str) -> ExecutionError:
    return ExecutionError("connection", f"unsupported database backend {name!r}")


#: URL schemes (SQLAlchemy backend names) -> engine classes, imported on first use.
ENGINES = Registry(
    "engine",
    {
        "sqlite": "sqlweave.db.sqlite:SQLiteEngine",
        **dict.fromkeys(("postgresql", "postgres"), "sqlweave.db.postgres:PostgresEngine"),
        "duckdb": "sqlweave.db.duckdb:DuckDBEngine",
    },
    base=Engine,
    unknown=_unsupported,
)


def register_engine(scheme: str, engine: type[Engine], *, replace: bool = False) -> None:
    """Make ``Database.open("<scheme>://...")`` open databases with ``engine``."""
    ENGINES.register(scheme, engine, replace=replace)
