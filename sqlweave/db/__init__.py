"""Read-only execution of untrusted SQL against SQLite, PostgreSQL and DuckDB.

Generated SQL is untrusted input. It may only read, and three independent layers make sure of it:

1. :func:`check_read_only` (:mod:`sqlweave.db.policy`) parses the text with sqlglot and accepts
   exactly one query statement (``SELECT`` / ``WITH`` / ``VALUES`` / a set operation; on DuckDB
   also ``DESCRIBE``, ``SUMMARIZE`` and ``PIVOT``) with no data-modifying node anywhere inside it
   and no dangerous function call. The text is bounded in length and nesting first, so parsing is
   fast and cannot overflow the stack.
2. The engine itself refuses writes: SQLite files are opened ``mode=ro`` with an authorizer that
   denies every write, ``ATTACH`` and ``PRAGMA``; PostgreSQL runs each query in a ``READ ONLY``
   transaction that is always rolled back, admits only functions the server's own catalog marks
   immutable or stable (less a deny list, see :data:`PG_DENIED_FUNCTIONS`), and refuses superuser
   connections unless asked; DuckDB files are opened ``read_only`` without external access.
3. Resources are bounded: the timeout covers parsing, execution and fetching (a SQLite progress
   handler plus a wall-clock watchdog calling ``interrupt()``, PostgreSQL's ``statement_timeout``
   plus a watchdog cancel, DuckDB's ``interrupt()``, and the deadline looked at between fetched
   chunks on every engine), results are capped in rows and in bytes, SQLite values in length and
   SQLite's heap in size, DuckDB's memory in size.

Successful results are cached per (database, SQL, row cap, byte cap), so evaluating the same gold
query many times costs one execution, and layer 1's verdicts per (SQL, dialect), so a text is parsed
once. See ``docs/security.md`` for the threat model.

The package, one job per module: :mod:`~sqlweave.db.errors` (``ExecutionError``,
``QueryResult``), :mod:`~sqlweave.db.policy` (layer 1), :mod:`~sqlweave.db.watchdog`,
:mod:`~sqlweave.db.fetch` (caps and the deadline while fetching), :mod:`~sqlweave.db.cache`,
:mod:`~sqlweave.db.scope` (table views), :mod:`~sqlweave.db.engine` (the engine protocol and its
registry), one module per engine (:mod:`~sqlweave.db.sqlite`, :mod:`~sqlweave.db.postgres`,
:mod:`~sqlweave.db.duckdb`), and :mod:`~sqlweave.db.database` (``Database``, the one door).
"""

from __future__ import annotations

from sqlweave.db.database import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    Database,
)
from sqlweave.db.duckdb import DUCKDB_MEMORY_LIMIT
from sqlweave.db.engine import ENGINES, Engine, register_engine
from sqlweave.db.errors import ExecutionError, QueryResult, classify_error
from sqlweave.db.policy import (
    FORBIDDEN_FUNCTIONS,
    FORBIDDEN_PREFIXES,
    MAX_NESTING,
    MAX_SQL_CHARS,
    SQLITE_MAX_FUNCTION_CALLS,
    VERDICT_CACHE_MAX_CHARS,
    VERDICT_CACHE_SIZE,
    _verdict,
    check_read_only,
)
from sqlweave.db.postgres import PG_DENIED_FUNCTIONS, PG_DENIED_PREFIXES, PG_HARMLESS_VOLATILE
from sqlweave.db.reflect import RawTable
from sqlweave.db.scope import TableScope
from sqlweave.db.sqlite import (
    SQLITE_HEAP_LIMIT,
    SQLITE_MAX_IDLE,
    SQLITE_MAX_LENGTH,
    SQLITE_MAX_LIKE_PATTERN,
    SQLITE_PROGRESS_STEPS,
)

# The public classes say where users import them from (error messages, docs, pickles).
for _public in (Database, ExecutionError, QueryResult):
    _public.__module__ = __name__
del _public

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "DEFAULT_TIMEOUT_S",
    "DUCKDB_MEMORY_LIMIT",
    "ENGINES",
    "FORBIDDEN_FUNCTIONS",
    "FORBIDDEN_PREFIXES",
    "MAX_NESTING",
    "MAX_SQL_CHARS",
    "PG_DENIED_FUNCTIONS",
    "PG_DENIED_PREFIXES",
    "PG_HARMLESS_VOLATILE",
    "SQLITE_HEAP_LIMIT",
    "SQLITE_MAX_FUNCTION_CALLS",
    "SQLITE_MAX_IDLE",
    "SQLITE_MAX_LENGTH",
    "SQLITE_MAX_LIKE_PATTERN",
    "SQLITE_PROGRESS_STEPS",
    "VERDICT_CACHE_MAX_CHARS",
    "VERDICT_CACHE_SIZE",
    "Database",
    "Engine",
    "ExecutionError",
    "QueryResult",
    "RawTable",
    "TableScope",
    "_verdict",
    "check_read_only",
    "classify_error",
    "register_engine",
]
