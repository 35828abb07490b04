"""SQLite: files opened ``mode=ro`` with an authorizer, a connection pool, a progress handler.

Layer 2 here is the authorizer (:func:`_untrusted_authorizer` denies every write, ``ATTACH`` and
``PRAGMA``) on a read-only connection; layer 3 is a progress handler plus the watchdog's
``interrupt()`` for time, and SQLite's own limits (value length, LIKE pattern length, a
process-wide heap cap) for memory. Each running query holds a connection of its own from
:class:`SQLitePool`.
"""

from __future__ import annotations

import ctypes
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from sqlweave.db.engine import Engine, Fetched
from sqlweave.db.errors import ExecutionError, classify_error, not_found
from sqlweave.db.fetch import fetch
from sqlweave.db.policy import FORBIDDEN_FUNCTIONS, MAX_SQL_CHARS, SQLITE_MAX_LIKE_PATTERN
from sqlweave.db.watchdog import WATCHDOG

logger = logging.getLogger(__name__)

#: What the SQLite authorizer refuses. ``glob`` stays allowed there: SQLite's ``x GLOB y``
#: operator runs the built-in glob() function, and gold queries use it.
_SQLITE_FORBIDDEN_FUNCTIONS = FORBIDDEN_FUNCTIONS - {"glob"}

#: Largest string or blob an untrusted SQLite query may build or read. A single SQLite
#: instruction (replace(), printf(), randomblob()) costs time in proportion to it and is never
#: interrupted midway, so this also bounds how far past its timeout a query can run.
SQLITE_MAX_LENGTH = 1_000_000
#: Process-wide cap on SQLite's heap (sqlite3_hard_heap_limit64), set on the first SQLite open
#: unless a lower one is already in force; allocations beyond it fail with "out of memory".
SQLITE_HEAP_LIMIT = 1024 * 1024 * 1024
#: SQLite virtual-machine instructions between two progress-handler calls. SQLite counts them
#: only at jumps, so straight-line code (one row of many expensive calls) is never checked; the
#: call cap (:data:`sqlweave.db.policy.SQLITE_MAX_FUNCTION_CALLS`) bounds that instead.
SQLITE_PROGRESS_STEPS = 1_000
#: Idle SQLite connections kept per database for reuse; busy ones are not counted.
SQLITE_MAX_IDLE = 8


_SQLITE_ALLOWED_ACTIONS = frozenset(
    {
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_FUNCTION,
        getattr(sqlite3, "SQLITE_RECURSIVE", 33),
    }
)
_SQLITE_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema"})
#: PRAGMAs an untrusted query may read (never set): a full-text (FTS5) table reads
#: ``data_version`` each time it opens, and it tells nothing but whether the file changed.
_SQLITE_READ_PRAGMAS = frozenset({"data_version"})


def _schema_declaration(action: int, table: str | None, db_name: Any) -> bool:
    """A virtual table (json_each, an FTS5 table) declaring its columns: SQLite's CREATE TABLE
    parser asks to update the schema table for it. No write can follow: the file is opened
    mode=ro, writable_schema stays off (PRAGMA is denied) and layer 1 refuses UPDATE."""
    return action == sqlite3.SQLITE_UPDATE and table in _SQLITE_SCHEMA_TABLES and db_name == "main"


def _untrusted_authorizer(
    action: int, arg1: str | None, arg2: str | None, db_name: Any, _trigger: Any
) -> int:
    """Allow only reads and harmless function calls; deny writes, ATTACH, PRAGMA and the rest."""
    if _schema_declaration(action, arg1, db_name):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _SQLITE_READ_PRAGMAS:
        return sqlite3.SQLITE_OK if arg2 is None else sqlite3.SQLITE_DENY
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
    if _schema_declaration(action, arg1, _db):
        return sqlite3.SQLITE_OK
    if action in _SQLITE_WRITE_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _SQLITE_FORBIDDEN_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


_HEAP_LIMIT_LOCK = threading.Lock()
_heap_limit_set = False


def _limit_sqlite_heap() -> None:
    """Cap SQLite's heap for the whole process (once), unless a lower cap is already set."""
    global _heap_limit_set
    with _HEAP_LIMIT_LOCK:
        if _heap_limit_set:
            return
        _heap_limit_set = True
        try:
            import _sqlite3

            limit = ctypes.CDLL(_sqlite3.__file__).sqlite3_hard_heap_limit64
        except (ImportError, OSError, AttributeError):
            logger.warning("cannot cap SQLite's heap: sqlite3_hard_heap_limit64 is unavailable")
            return
        limit.restype = ctypes.c_int64
        limit.argtypes = [ctypes.c_int64]
        current = limit(-1)
        if current <= 0 or current > SQLITE_HEAP_LIMIT:
            limit(SQLITE_HEAP_LIMIT)


def _sqlite_uri(path: Path, immutable: bool) -> str:
    return f"{path.resolve().as_uri()}?mode=ro{'&immutable=1' if immutable else ''}"


def _sqlite_connect(path: Path, authorizer: Any, immutable: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(_sqlite_uri(path, immutable), uri=True, check_same_thread=False)
    conn.text_factory = _decode_text
    # Sorts and temporary indexes stay in memory, bounded by the heap limit, instead of
    # spilling gigabytes of unlinked temporary files to disk within one query's timeout.
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.set_authorizer(authorizer)
    return conn


def _decode_text(raw: bytes) -> str:
    """Some benchmark databases hold invalid UTF-8; decode leniently rather than fail a query."""
    return raw.decode("utf-8", errors="replace")


def _wal_without_log(path: Path) -> bool:
    """A WAL-mode file with no (or an empty) -wal beside it: every committed page is in the file.

    Such a file can be opened ``immutable=1``, which reads it without creating ``-wal`` / ``-shm``
    files; ``mode=ro`` alone would create both. With a live ``-wal`` another process may be
    writing, so the ordinary shared read is kept.
    """
    with open(path, "rb") as fh:
        header = fh.read(20)
    if len(header) < 20 or header[18:20] != b"\x02\x02":
        return False
    wal = Path(f"{path}-wal")
    return not wal.exists() or wal.stat().st_size == 0


class SQLitePool:
    """Connections for untrusted queries: one per running query, a few kept idle for reuse.

    Each query holds its own connection (progress handlers are per connection), so threads never
    share one; a thread that ends leaves nothing open beyond :data:`SQLITE_MAX_IDLE` idle ones.
    ``close`` closes idle connections at once and interrupts busy ones, which their own thread
    closes when its query returns: closing a connection under a running statement crashes.
    """

    def __init__(self, factory: Callable[[], sqlite3.Connection], max_idle: int) -> None:
        self._factory = factory
        self._max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._busy: dict[int, tuple[sqlite3.Connection, int]] = {}
        self._generation = 0

    @property
    def open_count(self) -> int:
        with self._lock:
            return len(self._idle) + len(self._busy)

    def acquire(self) -> tuple[sqlite3.Connection, int]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
            generation = self._generation
        if conn is None:
            conn = self._factory()
        with self._lock:
            self._busy[id(conn)] = (conn, generation)
        return conn, generation

    def release(self, conn: sqlite3.Connection, generation: int) -> None:
        with self._lock:
            # Out of _busy under the lock before closing: close() interrupts only what is there.
            self._busy.pop(id(conn), None)
            keep = generation == self._generation and len(self._idle) < self._max_idle
            if keep:
                self._idle.append(conn)
        if not keep:
            conn.close()

    def closed_since(self, generation: int) -> bool:
        with self._lock:
            return generation != self._generation

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            self._generation += 1
            for conn, _ in self._busy.values():
                conn.interrupt()  # thread-safe; the running query returns and is closed then
        for conn in idle:
            conn.close()


# --- PostgreSQL engine guard ----------------------------------------------------------------------


class SQLiteEngine(Engine):
    """A SQLite file, read through :class:`SQLitePool` connections."""

    dialect = "sqlite"
    ddl_query = (
        "SELECT sql, name FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL "
        "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
    )

    def __init__(
        self, path: Path, name: str, sa_engine: sa.Engine, *, immutable: bool = False
    ) -> None:
        super().__init__(f"sqlite:///{path}", name, path, sa_engine)
        self._immutable = immutable
        self._pool = SQLitePool(self._new_conn, SQLITE_MAX_IDLE)

    @classmethod
    def open(cls, url: sa.URL, *, allow_superuser: bool = False) -> SQLiteEngine:
        if not url.database or url.database == ":memory:":
            raise ExecutionError("connection", "an in-memory SQLite database has nothing to read")
        return cls.open_file(Path(url.database), scheme="sqlite")

    @classmethod
    def open_file(cls, path: Path, *, scheme: str = "") -> SQLiteEngine:
        """Open the SQLite file at ``path`` (what a plain path given to ``Database.open`` names;
        ``scheme``: the URL's, when the path came from one, for the not-found message)."""
        if not path.is_file():
            raise not_found("SQLite", path, scheme)
        try:
            with open(path, "rb") as fh:
                header = fh.read(16)
        except OSError as err:
            raise ExecutionError("connection", f"cannot read {path}: {err.strerror}") from err
        if header != b"SQLite format 3\x00":
            raise ExecutionError("connection", f"not a SQLite database file: {path}")
        _limit_sqlite_heap()
        resolved = path.resolve()
        immutable = _wal_without_log(resolved)
        # A corrupted file passes the header test; reading the schema finds most damage now,
        # with a clear message, rather than as a traceback in introspection later.
        try:
            probe = _sqlite_connect(resolved, _introspection_authorizer, immutable)
            try:
                probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
            finally:
                probe.close()
        except sqlite3.Error as err:
            raise ExecutionError(
                "connection", f"corrupted or unreadable SQLite database {path}: {err}"
            ) from err
        # NullPool: every introspection call gets a connection of its own. A pooled one shared
        # between threads deadlocks: one thread holds SQLite's connection mutex while its
        # authorizer waits for the GIL, another holds the GIL while waiting for that mutex.
        engine = sa.create_engine(
            "sqlite://",
            creator=lambda: _sqlite_connect(resolved, _introspection_authorizer, immutable),
            poolclass=sa.pool.NullPool,
        )
        return cls(resolved, path.stem, engine, immutable=immutable)

    def _new_conn(self) -> sqlite3.Connection:
        assert self.path is not None
        conn = _sqlite_connect(self.path, _untrusted_authorizer, self._immutable)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, SQLITE_MAX_LENGTH)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 4 * MAX_SQL_CHARS)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, SQLITE_MAX_LIKE_PATTERN)
        return conn

    @property
    def open_connections(self) -> int:
        return self._pool.open_count

    def run(
        self, sql: str, deadline: float, max_rows: int | None, max_bytes: int | None
    ) -> Fetched:
        try:
            conn, generation = self._pool.acquire()
        except sqlite3.Error as err:
            raise ExecutionError("connection", f"cannot open {self.path}: {err}", sql) from err
        # Two clocks: the progress handler stops loops promptly; the watchdog's interrupt()
        # reaches queries whose instructions are too few or too long for the handler.
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), SQLITE_PROGRESS_STEPS)
        token = WATCHDOG.arm(deadline, conn.interrupt)
        cursor = None
        try:
            cursor = conn.execute(sql)
            columns = tuple(d[0] for d in cursor.description or ())
            rows, truncated = fetch(cursor, max_rows, max_bytes, deadline)
        except sqlite3.Error as err:
            if self._pool.closed_since(generation):
                raise ExecutionError(
                    "connection", "the database was closed while the query ran", sql
                ) from err
            if "interrupted" in str(err) and time.monotonic() < deadline:
                # Neither the deadline nor a close stopped it: a Ctrl-C, raised inside the
                # progress handler, which SQLite turns into "interrupted". It is the user's.
                raise KeyboardInterrupt from err
            text = str(err)
            raise ExecutionError(classify_error(text), text, sql) from err
        finally:
            # Closed whatever happened: a statement left active (a fetch stopped by its deadline)
            # would keep a late interrupt() armed for the connection's next query.
            if cursor is not None:
                cursor.close()
            WATCHDOG.disarm(token)
            conn.set_progress_handler(None, 0)
            if conn.in_transaction:
                conn.rollback()
            self._pool.release(conn, generation)
        return columns, rows, truncated

    def interrupt(self) -> None:
        """Close idle connections and interrupt busy ones (closed as their queries return)."""
        self._pool.close()
