""":class:`Database`: the one door through which untrusted SQL reaches any engine.

It holds what every engine shares: the limits' validation, the read-only check (layer 1), the
result cache, the table scope of a view, and the wording of timeouts. The engine behind it
(:class:`~sqlweave.db.engine.Engine`, chosen by the URL's scheme from
:data:`~sqlweave.db.engine.ENGINES`) runs the query under layers 2 and 3.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from sqlweave.db import policy
from sqlweave.db.cache import ResultCache
from sqlweave.db.engine import ENGINES, Engine
from sqlweave.db.errors import ExecutionError, QueryResult, first_line, masked
from sqlweave.db.reflect import RawTable
from sqlweave.db.scope import TableScope
from sqlweave.namecase import fit_case
from sqlweave.tablenames import to_real

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_ROWS = 10_000
#: Largest result (sum of value sizes) a query may return; larger results are truncated.
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


def is_duckdb_file(path: Path) -> bool:
    """Whether ``path`` is a DuckDB database file (its header holds ``DUCK`` at byte 8), so a
    plain path opens one as it opens a SQLite file."""
    try:
        with open(path, "rb") as fh:
            return fh.read(12)[8:12] == b"DUCK"
    except OSError:
        return False


class Database:
    """A read-only handle on one database. Open with :meth:`Database.open`.

    ``scope`` (None for the whole database) makes the handle a view: see :meth:`scoped`.
    """

    def __init__(
        self,
        backend: Engine,
        name: str,
        scope: TableScope | None = None,
        *,
        cache: ResultCache | None = None,
    ) -> None:
        self.backend = backend
        self.name = name
        self.scope = scope
        self._cache = ResultCache() if cache is None else cache

    def __repr__(self) -> str:
        return f"Database({self.name!r}, dialect={self.dialect!r})"

    # -- what the engine is ------------------------------------------------------------------------

    @property
    def dialect(self) -> str:
        """sqlglot's name for the engine's SQL (``sqlite``, ``postgres``, ``duckdb``)."""
        return self.backend.dialect

    @property
    def url(self) -> str:
        """The database's URL, any password hidden."""
        return self.backend.url

    @property
    def path(self) -> Path | None:
        """The database file, for file-based engines."""
        return self.backend.path

    @property
    def engine(self) -> sa.Engine | None:
        """The SQLAlchemy engine for trusted introspection, where the engine has one."""
        return self.backend.sa_engine

    @property
    def fingerprint(self) -> str:
        """Stable id of this database, for on-disk caches (path + size + mtime, or the URL).

        A SQLite file in WAL mode keeps new rows in ``<file>-wal`` until a checkpoint, leaving
        the file itself as it was: that log's size and mtime count too, so an index built
        before a write is not taken for one after it."""
        if self.path is not None:
            st = self.path.stat()
            key = f"{self.path}:{st.st_size}:{st.st_mtime_ns}"
            wal = self.path.with_name(self.path.name + "-wal")
            if wal.is_file():
                log = wal.stat()
                key += f":wal:{log.st_size}:{log.st_mtime_ns}"
        else:
            key = self.url
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def open_connections(self) -> int:
        """Connections this handle holds open now for untrusted queries, for monitoring."""
        return self.backend.open_connections

    def reflect(self) -> list[RawTable]:
        """Every table of the whole database from the engine's catalog (trusted introspection).

        A catalog the driver cannot read (a virtual table whose module is missing, a server
        gone) is an :class:`ExecutionError` naming the database, not the driver's own error."""
        try:
            return self.backend.reflect()
        except sa.exc.SQLAlchemyError as err:
            cause = getattr(err, "orig", None) or err
            raise ExecutionError(
                "connection", f"cannot read the tables of {self.name}: {first_line(str(cause))}"
            ) from err

    # -- views -------------------------------------------------------------------------------------

    def scoped(self, scope: TableScope | None) -> Database:
        """A view of this database limited to ``scope`` (None: every table again).

        The view shares this handle's engine, connections and result cache; closing either
        closes both.
        """
        return Database(self.backend, self.name, scope, cache=self._cache)

    @property
    def visible_tables(self) -> frozenset[str] | None:
        """The lower-cased tables this view shows, or None for the whole database."""
        return None if self.scope is None else self.scope.tables

    @property
    def display_names(self) -> Mapping[str, str] | None:
        """Real name (lower-cased) -> shown name, for a view showing short names."""
        return None if self.scope is None else self.scope.display_names

    @property
    def table_aliases(self) -> Mapping[str, str] | None:
        """Shown name (lower-cased) -> real name, applied to every query before it runs."""
        return None if self.scope is None else self.scope.table_aliases

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def open(
        cls, target: str | Path, *, name: str | None = None, allow_superuser: bool = False
    ) -> Database:
        """Open a SQLite or DuckDB file path (told apart by the file's header), or a URL
        (``sqlite:///``, ``postgresql://``, ``duckdb:///``, or the scheme of any engine
        registered in :data:`~sqlweave.db.engine.ENGINES`).

        Raises :class:`ExecutionError` (kind ``connection``) with a one-line message when the
        database is missing, unreachable, corrupted or the URL is malformed. A PostgreSQL role
        with superuser-like powers (SUPERUSER, REPLICATION, server-file or signal roles) is
        refused unless ``allow_superuser`` is true: connect as a read-only role instead (see
        ``docs/security.md``).
        """
        text = str(target)
        if "://" not in text and is_duckdb_file(Path(text)):
            text = f"duckdb:///{Path(text).resolve()}"
        if "://" not in text:
            from sqlweave.db.sqlite import SQLiteEngine

            backend: Engine = SQLiteEngine.open_file(Path(text))
        else:
            try:
                url = sa.engine.make_url(text)
                scheme = url.get_backend_name()
            except (sa.exc.ArgumentError, ValueError, TypeError) as err:
                raise ExecutionError(
                    "connection", f"malformed database URL {masked(text)!r}: {first_line(str(err))}"
                ) from err
            backend = ENGINES.load(scheme).open(url, allow_superuser=allow_superuser)
        return cls(backend, name or backend.default_name)

    # -- execution ---------------------------------------------------------------------------------

    def runnable(self, sql: str) -> str:
        """``sql`` as :meth:`execute` runs it: a view's short table names mapped to real ones
        (:func:`~sqlweave.tablenames.to_real`) and, on an engine that folds unquoted names to
        lower case, each bare name that exists only with capitals quoted
        (:func:`~sqlweave.namecase.fit_case`). Programs return their SQL so written, so that
        what a user reads is what ran."""
        if len(sql) > policy.MAX_SQL_CHARS:
            return sql  # refused by execute() as it is; not worth parsing to rename
        if self.table_aliases:
            sql = to_real(sql, self.table_aliases, self.dialect)
        if self.backend.folds_unquoted_names:
            sql = fit_case(sql, self.backend.case_names(), self.dialect)
        return sql

    def execute(
        self,
        sql: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_rows: int | None = DEFAULT_MAX_ROWS,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
        use_cache: bool = True,
    ) -> QueryResult:
        """Run one untrusted read-only query. Raises :class:`ExecutionError` on any failure.

        ``timeout_s`` covers checking, parsing, running and fetching; ``max_rows`` and
        ``max_bytes`` cap the result (``truncated`` tells). Raises ``ValueError`` for SQL that
        is not a string (None, bytes), a NaN, infinite or non-positive timeout or a negative
        cap: those are the caller's mistakes, not the query's.
        """
        if not isinstance(sql, str):
            raise ValueError(f"sql must be a string, not {type(sql).__name__}")
        policy.check_limits(timeout_s, max_rows, max_bytes)
        if self.backend.folds_unquoted_names:
            self.backend.case_names()  # the catalog, read once per engine, is no query's time
        start = time.monotonic()
        deadline = start + timeout_s
        sql = self.runnable(sql.strip())
        key = (sql, max_rows, max_bytes)
        if use_cache and (hit := self._cache.get(key)) is not None:
            return hit
        message = f"query did not finish within {timeout_s:g} s"
        if use_cache and self._cache.timed_out(key, timeout_s):
            raise ExecutionError("timeout", message + " (before, unchanged)", sql)
        policy.ensure_read_only(sql, self.dialect)
        if time.monotonic() >= deadline:
            raise ExecutionError("timeout", message, sql)
        try:
            columns, rows, truncated = self.backend.run(sql, deadline, max_rows, max_bytes)
        except ExecutionError as err:
            if err.kind != "timeout":
                raise
            if use_cache:
                self._cache.put_timeout(key, timeout_s)
            raise ExecutionError("timeout", message, sql) from err
        except MemoryError as err:
            raise ExecutionError("runtime", "query needs more memory than allowed", sql) from err
        except UnicodeError as err:
            raise ExecutionError("syntax", f"the query text cannot be sent: {err}", sql) from err
        except RecursionError as err:
            raise ExecutionError("syntax", "query nested too deeply", sql) from err
        result = QueryResult(columns, rows, truncated, time.monotonic() - start)
        if use_cache:
            self._cache.put(key, result)
        return result

    def try_execute(self, sql: str, **kwargs: Any) -> QueryResult | ExecutionError:
        """Like :meth:`execute`, but returns the error instead of raising it."""
        try:
            return self.execute(sql, **kwargs)
        except ExecutionError as err:
            return err

    def clear_cache(self) -> None:
        self._cache.clear()

    def close(self) -> None:
        """Close every connection. Queries still running in other threads are interrupted
        (SQLite and DuckDB: ``interrupt()``; PostgreSQL: a cancel request for the backend) and
        raise :class:`ExecutionError`; their connections are closed as they return."""
        self.backend.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
