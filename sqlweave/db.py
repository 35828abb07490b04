"""Read-only execution of untrusted SQL against SQLite, PostgreSQL and DuckDB.

Generated SQL is untrusted input. It may only read, and three independent layers make sure of it:

1. :func:`check_read_only` parses the text with sqlglot and accepts exactly one query statement
   (``SELECT`` / ``WITH`` / a set operation) with no data-modifying node anywhere inside it and no
   dangerous function call.
2. The engine itself refuses writes: SQLite files are opened ``mode=ro`` with an authorizer that
   denies every write, ``ATTACH`` and ``PRAGMA``; PostgreSQL runs each query in a ``READ ONLY``
   transaction that is always rolled back; DuckDB files are opened ``read_only``.
3. Timeouts really stop the query: a SQLite progress handler aborts the VM, PostgreSQL uses
   ``statement_timeout``, DuckDB is interrupted from a timer.

Successful results are cached per (database, SQL, row cap), so evaluating the same gold query many
times costs one execution.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_ROWS = 10_000

#: Function names refused anywhere in a query: they read files, load code, change settings or
#: talk to other servers.
FORBIDDEN_FUNCTIONS = frozenset(
    {
        "load_extension",
        "readfile",
        "writefile",
        "edit",
        "fts3_tokenizer",
        "zipfile",
        "sqlar_compress",
        "pg_read_file",
        "pg_read_binary_file",
        "pg_ls_dir",
        "pg_stat_file",
        "lo_import",
        "lo_export",
        "lo_unlink",
        "dblink",
        "dblink_exec",
        "pg_terminate_backend",
        "pg_cancel_backend",
        "pg_reload_conf",
        "pg_rotate_logfile",
        "set_config",
        "nextval",
        "setval",
        "pg_advisory_lock",
        "pg_advisory_xact_lock",
        "query_to_xml",
        "read_csv",
        "read_csv_auto",
        "read_parquet",
        "read_json",
        "read_json_auto",
        "read_text",
        "read_blob",
        "glob",  # DuckDB's glob() lists files; SQLite's GLOB operator parses as exp.Glob, not this
    }
)

#: Function-name prefixes refused the same way: session-level advisory locks outlive the
#: rolled-back transaction, and SQLite's pragma_* table-valued functions expose PRAGMA.
FORBIDDEN_PREFIXES = ("pg_advisory", "pg_try_advisory", "pragma_")

#: What the SQLite authorizer refuses. ``glob`` stays allowed there: SQLite's ``x GLOB y``
#: operator runs the built-in glob() function, and gold queries use it.
_SQLITE_FORBIDDEN_FUNCTIONS = FORBIDDEN_FUNCTIONS - {"glob"}

#: Largest string or blob an untrusted SQLite query may build (randomblob(1e9) and the like).
SQLITE_MAX_LENGTH = 100_000_000

#: sqlglot node types that modify data, schema, settings or sessions.
_WRITE_NODES: tuple[type[exp.Expression], ...] = tuple(
    getattr(exp, name)
    for name in (
        "Insert",
        "Update",
        "Delete",
        "Merge",
        "Create",
        "Drop",
        "Alter",
        "AlterTable",
        "Command",
        "Pragma",
        "Attach",
        "Detach",
        "Into",
        "Lock",
        "Set",
        "Transaction",
        "Commit",
        "Rollback",
        "Use",
        "Copy",
        "TruncateTable",
        "LoadData",
        "Analyze",
        "Grant",
        "Revoke",
    )
    if hasattr(exp, name)
)

_QUERY_ROOTS: tuple[type[exp.Expression], ...] = (exp.Select, exp.SetOperation, exp.Subquery)


class ExecutionError(Exception):
    """A query that could not run, with a message fit to show an LM as feedback.

    ``kind`` is one of ``syntax``, ``unknown_table``, ``unknown_column``, ``not_read_only``,
    ``timeout``, ``runtime`` or ``connection``.
    """

    def __init__(self, kind: str, message: str, sql: str = "") -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.sql = sql

    def feedback(self) -> str:
        """Short text describing the failure, for execution-guided correction prompts."""
        labels = {
            "syntax": "Syntax error",
            "unknown_table": "Unknown table",
            "unknown_column": "Unknown column",
            "not_read_only": "Refused (only read-only queries are allowed)",
            "timeout": "Timed out",
            "runtime": "Execution error",
            "connection": "Database unavailable",
        }
        return f"{labels.get(self.kind, 'Error')}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "message": self.message}


@dataclass(frozen=True)
class QueryResult:
    """Columns and rows of a finished query. ``truncated`` is set when ``max_rows`` cut it."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    truncated: bool = False
    elapsed_s: float = field(default=0.0, compare=False)

    def __len__(self) -> int:
        return len(self.rows)

    def preview(self, max_rows: int = 5, max_chars: int = 600) -> str:
        """Compact text rendering of the first rows, for prompts that show execution results."""
        lines = [" | ".join(self.columns)]
        lines += [" | ".join(_cell_text(v) for v in row) for row in self.rows[:max_rows]]
        more = len(self.rows) - max_rows
        if more > 0 or self.truncated:
            lines.append(f"... ({len(self.rows)}{'+' if self.truncated else ''} rows in total)")
        if not self.rows:
            lines.append("(no rows)")
        text = "\n".join(lines)
        return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


def _cell_text(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _refuse(message: str, sql: str) -> ExecutionError:
    return ExecutionError("not_read_only", message, sql)


def check_read_only(sql: str, dialect: str = "sqlite") -> exp.Expression:
    """Parse ``sql`` and return its AST if it is exactly one read-only query.

    Raises :class:`ExecutionError` (kind ``syntax`` or ``not_read_only``) otherwise. The check is
    the first of three layers; the engine-level guards stand even where sqlglot misreads a query.
    """
    if not sql or not sql.strip():
        raise ExecutionError("syntax", "empty query", sql)
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except (ParseError, TokenError) as err:
        raise ExecutionError("syntax", _describe_parse_error(err), sql) from err
    if len(statements) != 1:
        raise _refuse(f"expected exactly one statement, got {len(statements)}", sql)
    tree = statements[0]
    if not isinstance(tree, _QUERY_ROOTS):
        raise _refuse(f"only SELECT queries may run, not {tree.key.upper()}", sql)
    for node in tree.walk():
        if isinstance(node, _WRITE_NODES):
            raise _refuse(f"{node.key.upper()} is not allowed inside a query", sql)
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in FORBIDDEN_FUNCTIONS or name.startswith(FORBIDDEN_PREFIXES):
                raise _refuse(f"function {name}() is not allowed", sql)
        elif isinstance(node, exp.Table) and node.name.lower().startswith("pragma_"):
            # SQLite's argument-less pragma table functions parse as plain table names.
            raise _refuse(f"{node.name} (a PRAGMA) is not allowed", sql)
    return tree


def _describe_parse_error(err: Exception) -> str:
    """sqlglot's message plus the offending token and position, which an LM can act on."""
    details = getattr(err, "errors", None) or []
    if details:
        first = details[0]
        near = (first.get("highlight") or "").strip()
        where = f"line {first.get('line')}, col {first.get('col')}"
        desc = first.get("description") or "parse error"
        return f"{desc} near {near!r} ({where})" if near else f"{desc} ({where})"
    return _first_line(str(err))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


_ERROR_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("timeout", re.compile(r"interrupt|statement timeout|canceling statement", re.I)),
    (
        "not_read_only",
        re.compile(
            r"not authorized|authorization denied|readonly database|read-only transaction"
            r"|read_only|read-only|read-write mode|permission denied|must be superuser"
            r"|Permission Error|only one SELECT|data-modifying|INTO is not allowed"
            r"|multiple commands",
            re.I,
        ),
    ),
    (
        "unknown_column",
        re.compile(r"no such column|column .* does not exist|Referenced column", re.I),
    ),
    (
        "unknown_table",
        re.compile(
            r"no such table|relation .* does not exist|Table with name .* does not exist", re.I
        ),
    ),
    ("syntax", re.compile(r"syntax error|parser error|incomplete input", re.I)),
)


def classify_error(message: str) -> str:
    """Map an engine's error text onto an :class:`ExecutionError` kind."""
    for kind, pattern in _ERROR_PATTERNS:
        if pattern.search(message):
            return kind
    return "runtime"


def _normalize_row(row: tuple[Any, ...] | Any) -> tuple[Any, ...]:
    """Plain Python values: memoryview → bytes, Decimal → float, so results compare across engines."""
    out = []
    for value in row:
        if isinstance(value, memoryview):
            value = value.tobytes()
        elif type(value).__name__ == "Decimal":
            value = float(value)
        out.append(value)
    return tuple(out)


# --- SQLite engine guard ------------------------------------------------------------------------

_SQLITE_ALLOWED_ACTIONS = frozenset(
    {
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_FUNCTION,
        getattr(sqlite3, "SQLITE_RECURSIVE", 33),
    }
)


def _untrusted_authorizer(
    action: int, arg1: str | None, arg2: str | None, _db: Any, _trigger: Any
) -> int:
    """Allow only reads and harmless function calls; deny writes, ATTACH, PRAGMA and the rest."""
    if action not in _SQLITE_ALLOWED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _SQLITE_FORBIDDEN_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


_SQLITE_WRITE_ACTIONS = frozenset(
    getattr(sqlite3, name)
    for name in dir(sqlite3)
    if name.startswith(
        ("SQLITE_INSERT", "SQLITE_UPDATE", "SQLITE_DELETE", "SQLITE_CREATE", "SQLITE_DROP")
    )
    or name
    in ("SQLITE_ALTER_TABLE", "SQLITE_ATTACH", "SQLITE_DETACH", "SQLITE_REINDEX", "SQLITE_ANALYZE")
)


def _introspection_authorizer(
    action: int, arg1: str | None, arg2: str | None, _db: Any, _t: Any
) -> int:
    """Trusted introspection may use PRAGMA, but still never writes or attaches."""
    if action in _SQLITE_WRITE_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _SQLITE_FORBIDDEN_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _sqlite_connect(path: Path, authorizer: Any) -> sqlite3.Connection:
    uri = f"{path.resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    conn.text_factory = _decode_text
    conn.set_authorizer(authorizer)
    return conn


def _decode_text(raw: bytes) -> str:
    """Some benchmark databases hold invalid UTF-8; decode leniently rather than fail a query."""
    return raw.decode("utf-8", errors="replace")


# --- Database -------------------------------------------------------------------------------------


class _ResultCache:
    """A small thread-safe LRU of successful results keyed by (sql, max_rows)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._data: OrderedDict[tuple[str, int | None], QueryResult] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, int | None]) -> QueryResult | None:
        with self._lock:
            hit = self._data.get(key)
            if hit is not None:
                self._data.move_to_end(key)
            return hit

    def put(self, key: tuple[str, int | None], value: QueryResult) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


class Database:
    """A read-only handle on one database. Open with :meth:`Database.open`."""

    def __init__(
        self, url: str, dialect: str, name: str, engine: sa.Engine, path: Path | None = None
    ):
        self.url = url
        self.dialect = dialect
        self.name = name
        self.engine = engine
        self.path = path
        self._cache = _ResultCache()
        self._local = threading.local()
        # Every per-thread SQLite connection, so close() can close them all.
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Database({self.name!r}, dialect={self.dialect!r})"

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def open(cls, target: str | Path, *, name: str | None = None) -> Database:
        """Open a SQLite file path, or a SQLAlchemy URL (``sqlite:///``, ``postgresql://``, ``duckdb:///``).

        Raises :class:`ExecutionError` (kind ``connection``) with a clear message when the database is
        missing or unreachable.
        """
        text = str(target)
        if "://" not in text:
            return cls._open_sqlite(Path(text), name)
        url = sa.engine.make_url(text)
        backend = url.get_backend_name()
        if backend == "sqlite":
            if not url.database:
                raise ExecutionError(
                    "connection", "an in-memory SQLite database has nothing to read"
                )
            return cls._open_sqlite(Path(url.database), name)
        if backend in ("postgresql", "postgres"):
            return cls._open_postgres(url, name)
        if backend == "duckdb":
            return cls._open_duckdb(url, name)
        raise ExecutionError("connection", f"unsupported database backend {backend!r}")

    @classmethod
    def _open_sqlite(cls, path: Path, name: str | None) -> Database:
        if not path.is_file():
            raise ExecutionError("connection", f"SQLite database not found: {path}")
        with open(path, "rb") as fh:
            if fh.read(16) != b"SQLite format 3\x00":
                raise ExecutionError("connection", f"not a SQLite database file: {path}")
        resolved = path.resolve()
        engine = sa.create_engine(
            "sqlite://",
            creator=lambda: _sqlite_connect(resolved, _introspection_authorizer),
            poolclass=sa.pool.StaticPool,
        )
        return cls(f"sqlite:///{resolved}", "sqlite", name or path.stem, engine, resolved)

    @classmethod
    def _open_postgres(cls, url: sa.URL, name: str | None) -> Database:
        if url.drivername in ("postgresql", "postgres"):
            url = url.set(drivername="postgresql+psycopg")
        try:
            engine = sa.create_engine(url, pool_pre_ping=True)
            with engine.connect():
                pass
        except ModuleNotFoundError as err:
            raise ExecutionError(
                "connection", "PostgreSQL needs the driver: pip install 'sqlweave[postgres]'"
            ) from err
        except sa.exc.OperationalError as err:
            raise ExecutionError(
                "connection", f"cannot connect to PostgreSQL: {_first_line(str(err.orig))}"
            ) from err
        return cls(
            url.render_as_string(hide_password=True),
            "postgres",
            name or url.database or "postgres",
            engine,
        )

    @classmethod
    def _open_duckdb(cls, url: sa.URL, name: str | None) -> Database:
        path = Path(url.database or "")
        if not path.is_file():
            raise ExecutionError("connection", f"DuckDB database not found: {path}")
        try:
            # read_only keeps the file intact; without external access a query can neither read
            # nor write other files (COPY ... TO, read_csv, ATTACH), and the lock stops it from
            # switching that back on.
            config = {"enable_external_access": False, "lock_configuration": True}
            engine = sa.create_engine(url, connect_args={"read_only": True, "config": config})
        except ModuleNotFoundError as err:
            raise ExecutionError(
                "connection", "DuckDB needs: pip install 'sqlweave[duckdb]'"
            ) from err
        return cls(str(url), "duckdb", name or path.stem, engine, path)

    # -- execution ---------------------------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        """Stable id of this database, for on-disk caches (path + size + mtime, or the URL)."""
        if self.path is not None:
            st = self.path.stat()
            key = f"{self.path}:{st.st_size}:{st.st_mtime_ns}"
        else:
            key = self.url
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def execute(
        self,
        sql: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_rows: int | None = DEFAULT_MAX_ROWS,
        use_cache: bool = True,
    ) -> QueryResult:
        """Run one untrusted read-only query. Raises :class:`ExecutionError` on any failure."""
        sql = sql.strip()
        key = (sql, max_rows)
        if use_cache and (hit := self._cache.get(key)) is not None:
            return hit
        check_read_only(sql, self.dialect)
        start = time.perf_counter()
        if self.dialect == "sqlite":
            columns, rows, truncated = self._run_sqlite(sql, timeout_s, max_rows)
        elif self.dialect == "postgres":
            columns, rows, truncated = self._run_postgres(sql, timeout_s, max_rows)
        else:
            columns, rows, truncated = self._run_duckdb(sql, timeout_s, max_rows)
        result = QueryResult(columns, rows, truncated, time.perf_counter() - start)
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

    def _sqlite_conn(self) -> sqlite3.Connection:
        # One connection per thread: sqlite3 progress handlers are per connection, and DSPy
        # evaluates in threads.
        conn = getattr(self._local, "conn", None)
        if conn is None:
            assert self.path is not None
            conn = _sqlite_connect(self.path, _untrusted_authorizer)
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, SQLITE_MAX_LENGTH)
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _run_sqlite(self, sql: str, timeout_s: float, max_rows: int | None):
        conn = self._sqlite_conn()
        deadline = time.monotonic() + timeout_s
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            cursor = conn.execute(sql)
            columns = tuple(d[0] for d in cursor.description or ())
            rows, truncated = _fetch(cursor, max_rows)
        except sqlite3.Error as err:
            text = str(err)
            kind = classify_error(text)
            if kind == "timeout":
                text = f"query did not finish within {timeout_s:g} s"
            raise ExecutionError(kind, text, sql) from err
        finally:
            conn.set_progress_handler(None, 0)
            if conn.in_transaction:
                conn.rollback()
        return columns, rows, truncated

    def _run_postgres(self, sql: str, timeout_s: float, max_rows: int | None):
        try:
            with self.engine.connect() as conn:
                raw = conn.connection.dbapi_connection
                raw.rollback()
                raw.autocommit = False
                # psycopg now opens every transaction on this connection with BEGIN READ ONLY.
                raw.read_only = True
                try:
                    with raw.cursor() as setup:
                        setup.execute(
                            f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}"
                        )
                    # A server-side cursor: psycopg sends DECLARE ... CURSOR FOR <sql> through the
                    # extended protocol, so the server accepts exactly one statement and only a
                    # query (simple protocol would run "SELECT 1; COMMIT; DROP ..." in full), and
                    # rows come over only as far as max_rows asks. No params: % stays literal.
                    with raw.cursor(name="sqlweave_untrusted") as cursor:
                        cursor.execute(sql)
                        columns = tuple(d[0] for d in cursor.description or ())
                        rows, truncated = _fetch(cursor, max_rows)
                finally:
                    raw.rollback()
                    _release_session_state(raw)
        except ExecutionError:
            raise
        except Exception as err:  # psycopg errors have no common base we can import lazily
            orig = getattr(err, "orig", err)
            text = _first_line(str(orig))
            kind = classify_error(text)
            if kind == "timeout":
                text = f"query did not finish within {timeout_s:g} s"
            raise ExecutionError(kind, text, sql) from err
        return columns, rows, truncated

    def _run_duckdb(self, sql: str, timeout_s: float, max_rows: int | None):
        with self.engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            timer = threading.Timer(timeout_s, raw.interrupt)
            timer.start()
            try:
                # DuckDB's cursor runs every statement in the text; the engine's own parser
                # makes sure there is exactly one, and that it is a query.
                statements = raw.extract_statements(sql)
                kinds = [getattr(s.type, "name", str(s.type)) for s in statements]
                if kinds != ["SELECT"]:
                    raise ExecutionError(
                        "not_read_only", f"only one SELECT may run, got {kinds or 'nothing'}", sql
                    )
                cursor = raw.cursor()
                cursor.execute(sql)
                columns = tuple(d[0] for d in cursor.description or ())
                rows, truncated = _fetch(cursor, max_rows)
            except ExecutionError:
                raise
            except Exception as err:
                text = _first_line(str(err))
                kind = classify_error(text)
                if kind == "timeout":
                    text = f"query did not finish within {timeout_s:g} s"
                raise ExecutionError(kind, text, sql) from err
            finally:
                timer.cancel()
        return columns, rows, truncated

    def close(self) -> None:
        """Close every connection, including those other threads opened."""
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()
        self._local = threading.local()
        self.engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _release_session_state(raw: Any) -> None:
    """Drop what outlives a rolled-back PostgreSQL transaction: session advisory locks.

    The sqlglot layer refuses pg_advisory_lock(); this is the engine-side backstop, so a query
    cannot keep a lock on a pooled connection after it has finished.
    """
    try:
        with raw.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock_all()")
    finally:
        raw.rollback()


def _fetch(cursor: Any, max_rows: int | None) -> tuple[tuple[tuple[Any, ...], ...], bool]:
    if max_rows is None:
        raw = cursor.fetchall()
        return tuple(_normalize_row(r) for r in raw), False
    raw = cursor.fetchmany(max_rows + 1)
    truncated = len(raw) > max_rows
    return tuple(_normalize_row(r) for r in raw[:max_rows]), truncated
