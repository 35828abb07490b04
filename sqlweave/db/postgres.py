"""PostgreSQL: each query in a ``READ ONLY`` transaction that is always rolled back.

Layer 2 here: psycopg opens every transaction ``READ ONLY``; only functions the server's own
catalog marks immutable or stable are admitted (less :data:`PG_DENIED_FUNCTIONS`), checked on
the text's words; roles with superuser-like powers are refused unless asked; session state that
outlives a rollback (advisory locks) is dropped after every query. Layer 3: the query runs under
``statement_timeout`` and a watchdog cancel at its deadline (which also covers the ``FETCH``
round trips of the server-side cursor), and the server fails any row over the byte cap.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from typing import Any

import sqlalchemy as sa

from sqlweave.db.engine import Engine, Fetched
from sqlweave.db.errors import ExecutionError, classify_error, first_line, refuse
from sqlweave.db.fetch import fetch
from sqlweave.db.watchdog import WATCHDOG, RunningQueries

#: PostgreSQL functions refused even though the catalog marks them immutable or stable: they run
#: SQL given as text (the read-only transaction does not cover what that SQL calls), dump whole
#: schemas, assign transaction ids or load libraries.
PG_DENIED_FUNCTIONS = frozenset(
    {
        "query_to_xml",
        "query_to_xml_and_xmlschema",
        "query_to_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "table_to_xml",
        "table_to_xml_and_xmlschema",
        "table_to_xmlschema",
        "schema_to_xml",
        "schema_to_xml_and_xmlschema",
        "schema_to_xmlschema",
        "database_to_xml",
        "database_to_xml_and_xmlschema",
        "database_to_xmlschema",
        "ts_stat",
        "ts_rewrite",
        "txid_current",
        "txid_current_if_assigned",
        "pg_current_xact_id",
        "pg_current_xact_id_if_assigned",
        "fmgr_c_validator",
        "fmgr_internal_validator",
        "fmgr_sql_validator",
        "pg_cursor",
        "set_config",
        "setseed",
    }
)
#: Name prefixes refused on PostgreSQL whatever the catalog says (extensions, admin functions).
PG_DENIED_PREFIXES = (
    "dblink",
    "lo_",
    "pg_advisory",
    "pg_try_advisory",
    "pg_read",
    "pg_ls_",
    "pg_stat_reset",
    "pg_create_",
    "pg_drop_",
    "pg_replication",
    "pg_logical",
    "pg_backup",
    "pg_switch",
    "pg_terminate",
    "pg_cancel",
    "pg_reload",
    "pg_rotate",
    "pg_promote",
    "pg_import",
    "pg_file",
    "pg_log_",
    "pg_notify",
    "binary_upgrade",
)
#: Volatile PostgreSQL functions admitted all the same: no effect beyond the query itself.
PG_HARMLESS_VOLATILE = frozenset(
    {
        "random",
        "random_normal",
        "clock_timestamp",
        "timeofday",
        "gen_random_uuid",
        "pg_sleep",
        "pg_sleep_for",
        "pg_sleep_until",
    }
)

_PG_PRIVILEGE_SQL = """
SELECT current_user, r.rolsuper, r.rolreplication,
       pg_catalog.pg_has_role(current_user, 'pg_read_server_files', 'MEMBER'),
       pg_catalog.pg_has_role(current_user, 'pg_write_server_files', 'MEMBER'),
       pg_catalog.pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER'),
       pg_catalog.pg_has_role(current_user, 'pg_signal_backend', 'MEMBER')
FROM pg_catalog.pg_roles r WHERE r.rolname = current_user
"""
_PG_PRIVILEGE_NAMES = (
    "SUPERUSER",
    "REPLICATION",
    "pg_read_server_files",
    "pg_write_server_files",
    "pg_execute_server_program",
    "pg_signal_backend",
)

#: Every function name callable from SQL, and whether all its overloads are admitted: built in
#: (pg_catalog) and immutable, stable or known harmless. Functions taking ``internal`` cannot be
#: called from a query at all and are left out.
_PG_FUNCTIONS_SQL = """
SELECT p.proname,
       bool_and(n.nspname = 'pg_catalog'
                AND (p.provolatile IN ('i', 's') OR p.proname = ANY(%s)))
FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE NOT ('pg_catalog.internal'::pg_catalog.regtype = ANY(p.proargtypes::oid[]))
GROUP BY p.proname
"""

_WORD = re.compile(r"[^\W\d][\w$]*")
_UNICODE_ESCAPED = re.compile(r"\bu&['\"]", re.I)


def _pg_refuse_functions(sql: str, refused: frozenset[str]) -> None:
    """Refuse ``sql`` if any word in it names a function PostgreSQL must not run.

    Every word counts, inside string literals and comments too: no lexing, so no lexer mismatch
    with the server can hide a call. The price is a rare false refusal (a column named
    ``nextval``). Unicode-escaped identifiers (``U&"..."``) could spell any name and are refused.
    """
    if _UNICODE_ESCAPED.search(sql):
        raise refuse("Unicode-escaped identifiers (U&) are not allowed", sql)
    for word in {w.lower() for w in _WORD.findall(sql)}:
        if word in refused or word.startswith(PG_DENIED_PREFIXES):
            raise refuse(f"function {word}() is not allowed on PostgreSQL", sql)


def _pg_row_capped(sql: str, max_row_bytes: int) -> str:
    """Wrap ``sql`` so the server fails any result row larger than ``max_row_bytes``.

    The CASE makes the failing cast depend on the row, so the planner cannot fold it away. A
    subquery scan with a filter keeps the inner ORDER BY.
    """
    size = "pg_catalog.pg_column_size(sqlweave_q.*)"
    return (
        f"SELECT * FROM (\n{sql}\n) AS sqlweave_q WHERE CASE WHEN {size} > {int(max_row_bytes)} "
        f"THEN pg_catalog.int4('sqlweave: result row of ' || {size}::text || ' bytes') = 0 "
        "ELSE true END"
    )


_PG_ROW_TOO_BIG = re.compile(r"sqlweave: result row of (\d+) bytes")


# --- Database -------------------------------------------------------------------------------------


class PostgresEngine(Engine):
    """A PostgreSQL database reached through SQLAlchemy's pool and psycopg."""

    dialect = "postgres"
    folds_unquoted_names = True

    def __init__(self, url: str, default_name: str, sa_engine: sa.Engine) -> None:
        super().__init__(url, default_name, None, sa_engine)
        self._refused: frozenset[str] | None = None
        self._refused_lock = threading.Lock()
        self._running = RunningQueries()

    @classmethod
    def open(cls, url: sa.URL, *, allow_superuser: bool = False) -> PostgresEngine:
        if url.drivername in ("postgresql", "postgres"):
            url = url.set(drivername="postgresql+psycopg")
        shown = url.render_as_string(hide_password=True)
        try:
            engine = sa.create_engine(url, pool_pre_ping=True)
            with engine.connect() as conn:
                flags = conn.exec_driver_sql(_PG_PRIVILEGE_SQL).one()
        except ModuleNotFoundError as err:
            raise ExecutionError(
                "connection", "PostgreSQL needs the driver: pip install 'sqlweave[postgres]'"
            ) from err
        except (sa.exc.SQLAlchemyError, ValueError, TypeError) as err:
            orig = getattr(err, "orig", None) or err
            raise ExecutionError(
                "connection", f"cannot connect to PostgreSQL at {shown}: {first_line(str(orig))}"
            ) from err
        role, *flags = flags
        powers = [label for label, flag in zip(_PG_PRIVILEGE_NAMES, flags, strict=True) if flag]
        if powers and not allow_superuser:
            engine.dispose()
            raise ExecutionError(
                "connection",
                f"refusing to run untrusted SQL as PostgreSQL role {role!r}, which has "
                f"{', '.join(powers)}; connect as a read-only role (docs/security.md) or pass "
                "allow_superuser=True",
            )
        return cls(shown, url.database or "postgres", engine)

    def _refused_functions(self, raw: Any) -> frozenset[str]:
        with self._refused_lock:
            if self._refused is None:
                with raw.cursor() as cur:
                    cur.execute(_PG_FUNCTIONS_SQL, (sorted(PG_HARMLESS_VOLATILE),))
                    refused = {name for name, admitted in cur.fetchall() if not admitted}
                raw.rollback()
                self._refused = frozenset(refused | PG_DENIED_FUNCTIONS)
            return self._refused

    def run(
        self, sql: str, deadline: float, max_rows: int | None, max_bytes: int | None
    ) -> Fetched:
        try:
            with self.raw_connection() as raw:
                raw.rollback()
                _pg_refuse_functions(sql, self._refused_functions(raw))
                raw.autocommit = False
                # psycopg now opens every transaction on this connection with BEGIN READ ONLY.
                raw.read_only = True
                try:
                    return self._run_read_only(raw, sql, deadline, max_rows, max_bytes)
                finally:
                    raw.rollback()
                    _release_session_state(raw)
        except ExecutionError:
            raise
        except Exception as err:  # psycopg errors have no common base we can import lazily
            orig = getattr(err, "orig", err)
            text = first_line(str(orig))
            if big := _PG_ROW_TOO_BIG.search(text):
                raise ExecutionError(
                    "runtime",
                    f"a result row of {big.group(1)} bytes is larger than "
                    f"{max_bytes or PG_MAX_ROW_BYTES} bytes",
                    sql,
                ) from err
            raise ExecutionError(classify_error(text), text, sql) from err

    def _run_read_only(
        self, raw: Any, sql: str, deadline: float, max_rows: int | None, max_bytes: int | None
    ) -> Fetched:
        remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
        with raw.cursor() as setup:
            setup.execute(f"SET LOCAL statement_timeout = {remaining_ms}")
        # A server-side cursor: psycopg sends DECLARE ... CURSOR FOR <sql> through the extended
        # protocol, so the server accepts exactly one statement and only a query (simple
        # protocol would run "SELECT 1; COMMIT; DROP ..." in full), and rows come over only as
        # far as max_rows asks. No params: % stays literal.
        # Every row is capped, max_bytes=None included: the server's cancel cannot stop a row
        # already being sent, and one 1 GB value took 17.6 s and 2.9 GB to arrive.
        query = _pg_row_capped(sql, max_bytes or PG_MAX_ROW_BYTES)
        cancel = _cancel_of(raw)
        # statement_timeout times each FETCH on its own; the watchdog's cancel holds the
        # deadline across all of them.
        token = WATCHDOG.arm(deadline, cancel)
        try:
            with (
                self._running.stoppable(cancel, sql),
                raw.cursor(name="sqlweave_untrusted") as cursor,
            ):
                _load_as_text(cursor)
                cursor.execute(query)
                columns = tuple(d[0] for d in cursor.description or ())
                rows, truncated = fetch(cursor, max_rows, max_bytes, deadline)
        finally:
            WATCHDOG.disarm(token)
        return columns, rows, truncated

    def interrupt(self) -> None:
        """Send a cancel request for every running query's backend."""
        self._running.stop_all()


@functools.cache
def _text_oids() -> frozenset[int]:
    """The types psycopg would build Python objects of inside a fetch, where no deadline is
    looked at: json and jsonb, every range and multirange, every array. ``range_agg`` over
    3 M ranges took 40.7 s to decode at a 2 s timeout; as text it is one string."""
    from psycopg.postgres import types
    from psycopg.types.multirange import MultirangeInfo
    from psycopg.types.range import RangeInfo

    oids = set()
    for info in types:
        if info.name in ("json", "jsonb") or isinstance(info, RangeInfo | MultirangeInfo):
            oids.add(info.oid)
        if info.array_oid:
            oids.add(info.array_oid)
    return frozenset(oids)


def _load_as_text(cursor: Any) -> None:
    """This cursor (an untrusted query's) reads :func:`_text_oids` as PostgreSQL's text:
    ``{1,2}``, ``[1,5)``, ``{"a": 1}``. Gold and prediction go the same way, so comparisons
    hold; the trusted introspection's cursors keep psycopg's objects."""
    from psycopg.types.string import TextLoader

    for oid in _text_oids():
        cursor.adapters.register_loader(oid, TextLoader)


#: The largest row a PostgreSQL query may send when the caller sets no byte cap.
PG_MAX_ROW_BYTES = 64 * 1024 * 1024
#: How long a cancel request may wait for the server (psycopg's default is 30 s).
PG_CANCEL_TIMEOUT_S = 1.0


def _cancel_of(raw: Any) -> Any:
    """The connection's cancel request, bounded in time where psycopg allows it."""
    safe = getattr(raw, "cancel_safe", None)
    if safe is None:
        return raw.cancel
    return functools.partial(safe, timeout=PG_CANCEL_TIMEOUT_S)


def _release_session_state(raw: Any) -> None:
    """Drop what outlives a rolled-back PostgreSQL transaction: session advisory locks.

    The function checks refuse pg_advisory_lock(); this is the engine-side backstop, so a query
    cannot keep a lock on a pooled connection after it has finished.
    """
    try:
        with raw.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock_all()")
    finally:
        raw.rollback()
