"""An attacker's suite against :mod:`sqlweave.db` on SQLite, DuckDB and PostgreSQL.

Each engine gets every statement in one pass, through the public API only. Whatever a statement
does, the suite checks three things:

* nothing changed: SQLite and DuckDB files hash the same and no file appears beside them; on
  PostgreSQL the catalog, the copied tables, the WAL position, replication slots, statistics reset
  times and large objects are the same, and sessions of other roles are still alive;
* no exception other than :class:`ExecutionError` escaped;
* every runaway stopped within its timeout + 1 s, and memory bombs stayed under the stated bound
  (peak RSS of this process grows by less than :data:`MEMORY_BOUND`).

PostgreSQL runs as three roles: the owner, the read-only role and the superuser (with
``allow_superuser=True``; without it the connection is refused).
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa

from sqlweave.db import Database, ExecutionError, QueryResult, TableScope

TIMEOUT_S = 1.0
#: How far past its timeout any statement may run.
MARGIN_S = 1.0
#: Peak resident memory may grow by at most this much over one engine's whole suite.
MEMORY_BOUND = 1536 * 1024 * 1024
#: Result cap used for the suite (smaller than the default, so byte capping shows).
MAX_BYTES = 16 * 1024 * 1024
PWNED = Path(tempfile.gettempdir()) / "sqlweave_attack_pwned"

# --- statements ----------------------------------------------------------------------------------


def _nest(open_: str, inner: str, close: str, depth: int) -> str:
    return open_ * depth + inner + close * depth


#: Parser crashers: deep nesting and huge texts. Same text on every engine.
CRASHERS = {
    "parens_47": "SELECT " + _nest("(", "1", ")", 47),
    "parens_200": "SELECT " + _nest("(", "1", ")", 200),
    "calls_41": "SELECT " + _nest("abs(", "1", ")", 41),
    "calls_300": "SELECT " + _nest("coalesce(", "1", ")", 300),
    "subqueries_121": "SELECT " + _nest("(SELECT ", "1", ")", 121),
    "subqueries_in_from_60": "SELECT * FROM " + _nest("(SELECT * FROM ", "singer", ") t", 60),
    "not_chain_500": "SELECT " + "NOT " * 500 + "1",
    "case_nest_60": "SELECT " + "CASE WHEN 1 THEN " * 60 + "1" + " END" * 60,
    "unbalanced_parens": "SELECT " + "(" * 5000,
    "or_chain_1mb": "SELECT 1 FROM singer WHERE "
    + " OR ".join(f"singer_id = {i}" for i in range(70_000)),
    "in_list_1mb": "SELECT 1 FROM singer WHERE singer_id IN ("
    + ",".join(str(i) for i in range(200_000))
    + ")",
    "whitespace_1mb": "SELECT 1" + " " * 1_000_000 + "FROM singer",
    "comment_1mb": "SELECT 1 /*" + "x" * 1_000_000 + "*/",
    "nul_byte": "SELECT 1\x00; DROP TABLE singer",
    "only_comment": "-- nothing here",
    "only_semicolons": ";;;",
    "garbage_unicode": "SELECT \udcff\u202e FROM singer",
    "unterminated_string": "SELECT 'abc FROM singer",
    "unterminated_comment": "SELECT 1 /* and DROP TABLE singer",
}

#: Writes and session changes, spelled for every engine (lower-case names work everywhere).
WRITES = {
    "insert": "INSERT INTO singer (singer_id, name) VALUES (900, 'x')",
    "insert_select": "INSERT INTO singer SELECT * FROM singer",
    "update": "UPDATE singer SET name = 'pwned'",
    "update_where_true": "UPDATE singer SET age = age + 1 WHERE 1 = 1",
    "delete": "DELETE FROM singer",
    "delete_where": "DELETE FROM concert WHERE concert_id > 0",
    "drop_table": "DROP TABLE singer",
    "drop_view_if_exists": "DROP VIEW IF EXISTS pwned_v",
    "create_table": "CREATE TABLE pwned_t (x INTEGER)",
    "create_table_as": "CREATE TABLE pwned_t AS SELECT * FROM singer",
    "create_view": "CREATE VIEW pwned_v AS SELECT 1 AS x",
    "create_index": "CREATE INDEX pwned_i ON singer (name)",
    "create_temp_table": "CREATE TEMP TABLE pwned_tt AS SELECT 1 AS x",
    "alter_add_column": "ALTER TABLE singer ADD COLUMN pwned INTEGER",
    "alter_rename": "ALTER TABLE singer RENAME TO pwned_singer",
    "select_then_delete": "SELECT 1; DELETE FROM singer",
    "select_then_drop_no_space": "SELECT 1;DROP TABLE concert;",
    "comment_then_write": "SELECT 1 -- x\n; DELETE FROM singer",
    "block_comment_then_write": "SELECT 1 /* ; */ ; UPDATE singer SET name = 'x'",
    "write_first_comment": "/* SELECT 1; */ DELETE FROM singer",
    "cte_delete": "WITH d AS (DELETE FROM singer RETURNING *) SELECT count(*) FROM d",
    "cte_then_insert": "WITH x AS (SELECT 1 AS a) INSERT INTO singer (singer_id) SELECT a FROM x",
    "select_into": "SELECT * INTO pwned_t FROM singer",
    "begin": "BEGIN",
    "commit": "COMMIT",
    "rollback": "ROLLBACK",
    "savepoint": "SAVEPOINT pwned",
    "analyze": "ANALYZE singer",
    "vacuum": "VACUUM",
    "select_for_update": "SELECT * FROM singer FOR UPDATE",
    "explain_delete": "EXPLAIN DELETE FROM singer",
    "upsert": "INSERT INTO singer (singer_id, name) VALUES (1, 'x') "
    "ON CONFLICT (singer_id) DO UPDATE SET name = 'y'",
    "replace_into": "REPLACE INTO singer (singer_id, name) VALUES (1, 'x')",
    "truncate": "TRUNCATE TABLE singer",
    "merge": "MERGE INTO singer s USING concert c ON s.singer_id = c.concert_id "
    "WHEN MATCHED THEN DELETE",
    "grant": "GRANT ALL ON singer TO PUBLIC",
    "set_statement": "SET statement_timeout = 0",
}

SQLITE_ONLY = {
    "attach_memory": "ATTACH DATABASE ':memory:' AS pwned",
    "attach_new_file": f"ATTACH DATABASE 'file:{PWNED}.db?mode=rwc' AS pwned",
    "detach_main": "DETACH DATABASE main",
    "vacuum_into": f"VACUUM INTO '{PWNED}.db'",
    "pragma_journal_wal": "PRAGMA journal_mode = WAL",
    "pragma_writable_schema": "PRAGMA writable_schema = 1",
    "pragma_user_version": "PRAGMA user_version = 99",
    "pragma_query_only_off": "PRAGMA query_only = 0",
    "pragma_function": "SELECT * FROM pragma_table_info('singer')",
    "pragma_function_bare": "SELECT * FROM pragma_database_list",
    "update_sqlite_master": "UPDATE sqlite_master SET sql = 'x' WHERE name = 'singer'",
    "create_trigger": "CREATE TRIGGER pwned AFTER INSERT ON singer BEGIN DELETE FROM singer; END",
    "create_virtual_table": "CREATE VIRTUAL TABLE pwned USING fts5(x)",
    "load_extension": f"SELECT load_extension('{PWNED.with_name('sqlweave_evil.so')}')",
    "writefile": f"SELECT writefile('{PWNED}', 'x')",
    "readfile": "SELECT readfile('/etc/passwd')",
    "fts3_tokenizer": "SELECT fts3_tokenizer('simple')",
    "reindex": "REINDEX",
    "begin_exclusive": "BEGIN EXCLUSIVE",
    "release_savepoint": "RELEASE pwned",
}

DUCKDB_ONLY = {
    "copy_to_file": f"COPY singer TO '{PWNED}.csv'",
    "copy_query_to_file": f"COPY (SELECT 1) TO '{PWNED}.parquet' (FORMAT parquet)",
    "export_database": f"EXPORT DATABASE '{PWNED}_dir'",
    "attach_file": f"ATTACH '{PWNED}.duckdb' AS pwned",
    "install_extension": "INSTALL httpfs",
    "load_extension": "LOAD httpfs",
    "set_external_access": "SET enable_external_access = true",
    "reset_external_access": "RESET enable_external_access",
    "set_memory_limit": "SET memory_limit = '100GB'",
    "pragma_set": "PRAGMA threads = 1",
    "read_csv": "SELECT * FROM read_csv('/etc/passwd')",
    "read_csv_auto": "SELECT * FROM read_csv_auto('/etc/hostname')",
    "read_text": "SELECT * FROM read_text('/etc/passwd')",
    "read_blob": "SELECT * FROM read_blob('/etc/passwd')",
    "glob_files": "SELECT * FROM glob('/etc/*')",
    "replacement_scan_file": "SELECT * FROM '/etc/passwd'",
    "create_macro": "CREATE MACRO pwned(a) AS a + 1",
    "create_sequence": "CREATE SEQUENCE pwned_seq",
    "checkpoint": "CHECKPOINT",
    "setseed": "SELECT setseed(0.42)",
    "use_other": "USE memory",
    "detach": "DETACH DATABASE IF EXISTS pwned",
}

#: PostgreSQL: functions that hide SQL in strings, write WAL or files, or reach other sessions.
#: ``{victim}`` is the backend pid of a session of another role.
PG_ONLY = {
    "query_to_xml_delete": "SELECT query_to_xml('DELETE FROM singer RETURNING 1', true, true, '')",
    "query_to_xml_terminate": (
        "SELECT query_to_xml('SELECT pg_terminate_backend({victim})', true, true, '')"
    ),
    "query_to_xml_and_schema": (
        "SELECT query_to_xml_and_xmlschema('SELECT pg_switch_wal()', true, true, '')"
    ),
    "query_to_xml_qualified": (
        f"SELECT pg_catalog.query_to_xml('SELECT lo_export(1, ''{PWNED}'')', true, true, '')"
    ),
    "query_to_xml_quoted": "SELECT \"query_to_xml\"('SELECT 1', true, true, '')",
    "query_to_xml_comment_gap": "SELECT query_to_xml/**/('SELECT 1', true, true, '')",
    "query_to_xml_nested_comment": ("SELECT query_to_xml/* /* */ */('SELECT 1', true, true, '')"),
    "query_to_xml_unicode_ident": (
        "SELECT U&\"\\0071uery_to_xml\"('SELECT pg_switch_wal()', true, true, '')"
    ),
    "query_to_xmlschema": "SELECT query_to_xmlschema('SELECT 1', true, true, '')",
    "table_to_xml": "SELECT table_to_xml('singer', true, true, '')",
    "database_to_xml": "SELECT database_to_xml(true, true, '')",
    "ts_stat_inner_slot": (
        "SELECT * FROM ts_stat('SELECT to_tsvector(x::text) FROM "
        "pg_create_physical_replication_slot(''sqlweave_pwned'') x')"
    ),
    "ts_stat_terminate": (
        "SELECT * FROM ts_stat('SELECT to_tsvector(pg_terminate_backend({victim})::text)')"
    ),
    "ts_rewrite_query": "SELECT ts_rewrite('a'::tsquery, 'SELECT ''a''::tsquery, ''b''::tsquery')",
    "emit_message": "SELECT pg_logical_emit_message(false, 'p', repeat('x', 50000000))",
    "emit_message_transactional": "SELECT pg_logical_emit_message(true, 'p', 'x')",
    "switch_wal": "SELECT pg_switch_wal()",
    "physical_slot": "SELECT pg_create_physical_replication_slot('sqlweave_pwned')",
    "logical_slot": "SELECT pg_create_logical_replication_slot('sqlweave_pwned2', 'pgoutput')",
    "drop_slot": "SELECT pg_drop_replication_slot('sqlweave_pwned')",
    "stat_reset": "SELECT pg_stat_reset()",
    "stat_reset_shared": "SELECT pg_stat_reset_shared('bgwriter')",
    "stat_reset_table": "SELECT pg_stat_reset_single_table_counters('singer'::regclass)",
    "stat_reset_slru": "SELECT pg_stat_reset_slru(NULL)",
    "backup_start": "SELECT pg_backup_start('pwned')",
    "terminate_victim": "SELECT pg_terminate_backend({victim})",
    "terminate_all": "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> 0",
    "cancel_victim": "SELECT pg_cancel_backend({victim})",
    "reload_conf": "SELECT pg_reload_conf()",
    "rotate_logfile": "SELECT pg_rotate_logfile()",
    "read_file": "SELECT pg_read_file('/etc/passwd')",
    "read_binary_file": "SELECT pg_read_binary_file('postgresql.conf')",
    "ls_dir": "SELECT pg_ls_dir('.')",
    "stat_file": "SELECT pg_stat_file('postgresql.conf')",
    "lo_import": "SELECT lo_import('/etc/passwd')",
    "lo_export": f"SELECT lo_export(lo_from_bytea(0, 'x'), '{PWNED}')",
    "lo_from_bytea": "SELECT lo_from_bytea(0, 'pwned')",
    "lo_create": "SELECT lo_create(0)",
    "set_config_ro_off": "SELECT set_config('transaction_read_only', 'off', false)",
    "set_config_in_where": (
        "SELECT 1 FROM singer WHERE set_config('statement_timeout', '0', false) IS NOT NULL"
    ),
    "nextval": "SELECT nextval('pwned_seq')",
    "txid_current": "SELECT txid_current()",
    "xact_id": "SELECT pg_current_xact_id()",
    "notify": "SELECT pg_notify('pwned', 'x')",
    "advisory_lock": "SELECT pg_advisory_lock(7)",
    "try_advisory_lock_shared": "SELECT pg_try_advisory_lock_shared(8)",
    "dblink": "SELECT * FROM dblink('dbname=sqlweave', 'DELETE FROM singer') AS t(x int)",
    "copy_to_program": f"COPY singer TO PROGRAM 'touch {PWNED}'",
    "copy_from_file": "COPY singer FROM '/etc/passwd'",
    "do_block": "DO $$ BEGIN PERFORM pg_switch_wal(); END $$",
    "call_procedure": "CALL pwned()",
    "prepare": "PREPARE pwned AS DELETE FROM singer",
    "listen": "LISTEN pwned",
    "set_role": "SET ROLE postgres",
    "set_session_authorization": "SET SESSION AUTHORIZATION postgres",
    "reset_all": "RESET ALL",
    "discard_all": "DISCARD ALL",
    "lock_table": "LOCK TABLE singer IN ACCESS EXCLUSIVE MODE",
    "create_function": "CREATE FUNCTION pwned() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "alter_system": "ALTER SYSTEM SET work_mem = '1TB'",
    "checkpoint": "CHECKPOINT",
    "dollar_string_hides_nothing": "SELECT $q$ ; $q$; DELETE FROM singer",
    "estring_hides_call": "SELECT E'\\' , query_to_xml(''SELECT 1'', true, true, '''') , '\\''",
    "cursor_declare": "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
    "import_foreign_schema": "IMPORT FOREIGN SCHEMA public FROM SERVER s INTO public",
}

#: Runaways: each must end in a timeout within TIMEOUT_S + MARGIN_S.
RUNAWAYS_COMMON = {
    "recursive_cte": (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    ),
    "cross_join_12": "SELECT count(*) FROM " + ", ".join(f"singer s{i}" for i in range(12)),
}
RUNAWAYS = {
    "sqlite": {
        # A few very expensive instructions: nested replace() on the largest allowed string.
        "replace_chain_60": "SELECT length("
        + _nest("replace(", "printf('%.*c', 1000000, 'a')", ", 'a', 'a')", 60)
        + ")",
        "replace_sum_60": "SELECT "
        + " + ".join(["length(replace(printf('%.*c', 1000000, 'a'), 'a', 'b'))"] * 60),
        "randomblob_columns": "SELECT "
        + ", ".join(["length(randomblob(1000000))"] * 200)
        + " FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
        "SELECT x FROM c)",
        "like_scan": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
        "SELECT count(*) FROM c WHERE printf('%.*c', 10000, 'a') || x LIKE '%b%'",
        "replace_sum_600": "SELECT "
        + " + ".join(["length(replace(printf('%.*c', 1000000, 'a'), 'a', 'b'))"] * 600),
        "randomblob_columns_1500": "SELECT " + ", ".join(["length(randomblob(1000000))"] * 1500),
        "like_long_pattern": "SELECT printf('%.*c', 1000000, 'a') LIKE '%' || "
        "printf('%.*c', 40000, 'a') || 'b%'",
        # One printf whose loop runs to its precision, not its (capped) output: 6 s a call.
        "printf_precision_huge": "SELECT printf('%.*c', 2147483647, 'x') IS NULL, "
        "printf('%2147483646c', 'x') IS NULL",
        # Pattern matches of a 1 MB value, each uninterruptible: 20 took 16 s once.
        "like_terms_20": "WITH t(s) AS MATERIALIZED (SELECT replace(hex(zeroblob(495000)), "
        "'0', 'a')), u(p) AS MATERIALIZED (SELECT '%' || replace(hex(zeroblob(49)), '0', 'a') "
        "|| 'b') SELECT " + " + ".join(["(s LIKE p)"] * 20) + " FROM t, u",
        "like_literal_terms": "WITH t(s) AS MATERIALIZED (SELECT replace(hex(zeroblob(495000)), "
        "'0', 'a')) SELECT " + " + ".join([f"(s LIKE '%{'a' * 98}b')"] * 20) + " FROM t",
        "sort_spill": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
        "SELECT x, hex(randomblob(500)) FROM c ORDER BY 2 LIMIT 1 OFFSET 100000000",
        **RUNAWAYS_COMMON,
    },
    "duckdb": {
        "range_sum": "SELECT sum(a * b) FROM range(100000000000) t(a), range(10) u(b)",
        "string_agg_huge": "SELECT length(string_agg(repeat('x', 100), '')) FROM range(1000000000)",
        # One scalar call building a list, outside the interrupt and the memory limit.
        "list_resize_huge": "SELECT length(list_resize([1], 100000000))",
        "range_value_huge": "SELECT length(range(0, 50000000))",
        "repeat_list_huge": "SELECT length(repeat([1], 30000000))",
        # Two small sizes, one 1 GB value.
        "repeat_nested": "SELECT length(repeat(repeat('x', 1000000), 1000))",
        "string_split_huge": "SELECT len(string_split(repeat('a,', 20000000), ','))",
        "lpad_huge": "SELECT length(lpad('', 500000000, 'ab'))",
        # A PIVOT that finds its own values plans a column per value where no interrupt reaches.
        "pivot_dynamic_wide": "PIVOT (SELECT range::varchar AS k, 1 AS v FROM range(99000)) "
        "ON k USING count(*), sum(v), max(v), min(v)",
        # Spills to a folder beside the database unless spilling is off.
        "distinct_spill": "SELECT count(*) FROM (SELECT DISTINCT md5(a::varchar) || "
        "md5((a + 1)::varchar) FROM range(60000000) t(a))",
        **RUNAWAYS_COMMON,
    },
    "postgres": {
        "pg_sleep": "SELECT pg_sleep(30)",
        "series_cross": (
            "SELECT count(*) FROM generate_series(1, 100000000) a, generate_series(1, 1000) b"
        ),
        "regex_blowup": "SELECT repeat('a', 40) ~ '^(a+)+$' || ''",
        # length() over a 500 MB value ignores a cancel: 1.2 s a call.
        "length_of_huge": "SELECT "
        + " + ".join(["length(x)::int8"] * 12)
        + " FROM (SELECT repeat(repeat('x', 1000000), 500) x OFFSET 0) t",
        **RUNAWAYS_COMMON,
    },
}

#: Memory bombs: an error, or a result truncated at MAX_BYTES; never the whole thing.
BOMBS = {
    "sqlite": {
        "zeroblob_rows": "SELECT zeroblob(100000000) FROM singer",
        "randomblob_huge": "SELECT randomblob(200000000)",
        "replace_50mb": "SELECT length(replace(printf('%.*c', 50000000, 'a'), 'a', 'bb'))",
        "wide_rows": "SELECT printf('%.*c', 900000, 'a') AS a, printf('%.*c', 900000, 'b') AS b "
        "FROM singer s1, singer s2, singer s3",
        "group_concat_big": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
        "WHERE x < 3000000) SELECT group_concat(x) FROM c",
    },
    "duckdb": {
        "repeat_rows": "SELECT repeat('x', 10000000) FROM range(50)",
        # Not here: 1 MB rows by the thousand. DuckDB computes 2,048-row vectors, so the first
        # row fetched costs ~2 GB and ~10 s (docs/security.md, known limits).
        "list_huge": "SELECT list(range) FROM range(300000000)",
    },
    "postgres": {
        "repeat_rows": "SELECT repeat('x', 100000000) FROM generate_series(1, 20)",
        "many_medium_rows": "SELECT repeat('x', 100000) FROM generate_series(1, 100000)",
        "array_agg_huge": "SELECT array_agg(g) FROM generate_series(1, 300000000) g",
        "string_agg_huge": "SELECT string_agg(repeat('x', 1000), '') FROM generate_series(1, 2000000)",
    },
}

#: Reads that must keep working (harmless, and refused before this suite existed).
HARMLESS = {
    "sqlite": {
        "values": "VALUES (1, 'a'), (2, 'b')",
        "json_each": "SELECT value FROM json_each('[1, 2, 3]')",
        "json_tree_join": "SELECT s.name, j.value FROM singer s, json_each('[1]') j LIMIT 2",
        "union_values": "SELECT 1 UNION ALL VALUES (2)",
        "random": "SELECT abs(random()) >= 0",
    },
    "duckdb": {
        "values": "VALUES (1, 'a'), (2, 'b')",
        "describe": "DESCRIBE singer",
        "describe_query": "DESCRIBE SELECT * FROM singer",
        "summarize": "SUMMARIZE singer",
        "pivot": "PIVOT singer ON country IN ('United States', 'France') USING count(*)",
        "pivot_in_from": "SELECT * FROM singer PIVOT (count(*) FOR country IN ('France'))",
        "range_value_small": "SELECT length(range(0, 50))",
        "random": "SELECT random() >= 0",
    },
    "postgres": {
        "values": "VALUES (1, 'a'), (2, 'b')",
        "random": "SELECT random() >= 0",
        "now": "SELECT now() IS NOT NULL",
        "to_char": "SELECT to_char(now(), 'YYYY')",
        "generate_series": "SELECT count(*) FROM generate_series(1, 10)",
        "string_agg": "SELECT string_agg(name, ',' ORDER BY name) FROM singer",
        "duplicate_column_names": "SELECT 1 AS a, 2 AS a",
        "order_by_kept": "SELECT singer_id FROM singer ORDER BY singer_id DESC",
    },
}


def statements(engine: str) -> dict[str, str]:
    """Every refused statement run on ``engine`` (runaways and bombs apart)."""
    own = {"sqlite": SQLITE_ONLY, "duckdb": DUCKDB_ONLY, "postgres": PG_ONLY}[engine]
    return {**CRASHERS, **WRITES, **own}


# --- running and judging ---------------------------------------------------------------------


@dataclass
class Report:
    """Outcome of one engine's (or role's) pass."""

    label: str
    runs: int = 0
    refused: int = 0
    accepted: int = 0
    slowest_overrun_s: float = -TIMEOUT_S
    escaped: list[str] = field(default_factory=list)  # exceptions other than ExecutionError
    ran: list[str] = field(default_factory=list)  # statements that should have been refused
    slow: list[str] = field(default_factory=list)
    bad_bombs: list[str] = field(default_factory=list)
    broken_reads: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.label}: {self.runs} statements, {self.refused} refused or stopped, "
            f"{self.accepted} harmless accepted, {len(self.escaped)} other exceptions, "
            f"slowest overrun {self.slowest_overrun_s:+.2f} s"
        )


def _run(db: Database, sql: str, report: Report, name: str) -> QueryResult | ExecutionError | None:
    report.runs += 1
    start = time.monotonic()
    try:
        outcome: QueryResult | ExecutionError = db.execute(
            sql, timeout_s=TIMEOUT_S, max_bytes=MAX_BYTES, use_cache=False
        )
    except ExecutionError as err:
        outcome = err
    except BaseException as err:  # the point: nothing else may escape
        report.escaped.append(f"{name}: {type(err).__name__}: {str(err)[:120]}")
        return None
    elapsed = time.monotonic() - start
    report.slowest_overrun_s = max(report.slowest_overrun_s, elapsed - TIMEOUT_S)
    if elapsed > TIMEOUT_S + MARGIN_S:
        report.slow.append(f"{name}: {elapsed:.2f} s")
    return outcome


def _size(result: QueryResult) -> int:
    return sum(len(v) if isinstance(v, str | bytes) else 8 for row in result.rows for v in row)


def run_suite(db: Database, engine: str, label: str, fill: dict[str, str] | None = None) -> Report:
    report = Report(label)
    fill = fill or {}
    for name, sql in statements(engine).items():
        outcome = _run(db, sql.format(**fill) if "{" in sql and fill else sql, report, name)
        if isinstance(outcome, QueryResult):
            report.ran.append(name)
        elif outcome is not None:
            report.refused += 1
    for name, sql in RUNAWAYS[engine].items():
        # Stopped, refused, or (a few) finished: always within the time checked in _run.
        outcome = _run(db, sql, report, name)
        if isinstance(outcome, ExecutionError):
            report.refused += 1
    for name, sql in BOMBS[engine].items():
        outcome = _run(db, sql, report, name)
        if isinstance(outcome, QueryResult):
            if not outcome.truncated and _size(outcome) > MAX_BYTES:
                report.bad_bombs.append(f"{name}: {_size(outcome)} bytes")
            report.accepted += 1
        elif outcome is not None:
            report.refused += 1
    for name, sql in HARMLESS[engine].items():
        outcome = _run(db, sql, report, name)
        if isinstance(outcome, QueryResult) and outcome.rows:
            report.accepted += 1
        else:
            report.broken_reads.append(f"{name}: {outcome}")
    return report


def _assert_clean(report: Report) -> None:
    print(report.summary())
    assert not report.escaped, report.escaped
    assert not report.ran, f"ran: {report.ran}"
    assert not report.slow, f"past timeout + {MARGIN_S} s: {report.slow}"
    assert not report.bad_bombs, report.bad_bombs
    assert not report.broken_reads, report.broken_reads


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _no_pwned_files() -> list[Path]:
    return [p for p in PWNED.parent.glob(PWNED.name + "*")]


@pytest.fixture(autouse=True)
def _clean_pwned() -> Iterator[None]:
    for path in _no_pwned_files():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    yield


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _listing(folder: Path) -> dict[str, str]:
    """Every entry of ``folder``: a file by its hash, anything else (a spill folder) by kind."""
    return {p.name: _sha256(p) if p.is_file() else "not a file" for p in folder.iterdir()}


def test_suite_is_large_enough() -> None:
    per_engine = {e: len(statements(e)) + len(RUNAWAYS[e]) + len(BOMBS[e]) for e in RUNAWAYS}
    # PostgreSQL runs once per role (owner, read-only, superuser).
    total = per_engine["sqlite"] + per_engine["duckdb"] + 3 * per_engine["postgres"]
    assert total >= 150, per_engine
    assert all(n >= 50 for n in per_engine.values()), per_engine


# --- SQLite and DuckDB --------------------------------------------------------------------------


@pytest.fixture
def sqlite_copy(demo_concert_db: Path, tmp_path: Path) -> Path:
    target = tmp_path / "concert_singer.sqlite"
    shutil.copyfile(demo_concert_db, target)
    target.chmod(0o644)  # writable: only sqlweave's guards stand in the way
    return target


def test_sqlite_attacks_change_nothing(sqlite_copy: Path) -> None:
    before = _listing(sqlite_copy.parent)
    rss = _peak_rss()
    with Database.open(sqlite_copy) as db:
        report = run_suite(db, "sqlite", "sqlite")
        assert db.execute("SELECT count(*) FROM singer", use_cache=False).rows == ((6,),)
    _assert_clean(report)
    assert _listing(sqlite_copy.parent) == before, "a file changed or appeared"
    assert not _no_pwned_files()
    assert _peak_rss() - rss < MEMORY_BOUND


def test_sqlite_sorts_stay_in_memory(sqlite_copy: Path) -> None:
    """Sorts and temporary indexes are bounded by the heap cap, not spilled to unlinked files."""
    with Database.open(sqlite_copy) as db:
        conn = db.backend._new_conn()
        conn.set_authorizer(None)  # PRAGMA is refused to queries; this reads the setting
        assert conn.execute("PRAGMA temp_store").fetchone() == (2,)  # 2: MEMORY
        conn.close()


def test_an_overlong_text_is_refused_before_a_scoped_view_parses_it(tmp_path: Path) -> None:
    path = tmp_path / "merged.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE ns__singer (singer_id INTEGER)")
        conn.execute("CREATE TABLE ns__concert (concert_id INTEGER)")
    sql = "SELECT 1 FROM singer WHERE " + " OR ".join(["singer_id = 0"] * 100_000)
    with Database.open(path) as db:
        view = db.scoped(TableScope.of(["ns__singer", "ns__concert"], short=True))
        assert "ns__singer" in view.runnable("SELECT 1 FROM singer")  # the view renames
        start = time.monotonic()
        refused = view.try_execute(sql, timeout_s=TIMEOUT_S, use_cache=False)
        assert time.monotonic() - start < 0.5
    assert isinstance(refused, ExecutionError) and "too long" in refused.message


def test_duckdb_attacks_change_nothing(sqlite_copy: Path, tmp_path: Path) -> None:
    pytest.importorskip("duckdb_engine")
    from sqlweave.transfer import copy_sqlite_to_duckdb

    folder = tmp_path / "duck"
    path = copy_sqlite_to_duckdb(sqlite_copy, folder / "concert_singer.duckdb")
    before = _listing(folder)
    rss = _peak_rss()
    with Database.open(f"duckdb:///{path}") as db:
        report = run_suite(db, "duckdb", "duckdb")
        assert db.execute("SELECT count(*) FROM singer", use_cache=False).rows == ((6,),)
    _assert_clean(report)
    assert _listing(folder) == before, "a file changed or appeared"
    assert not _no_pwned_files()
    assert _peak_rss() - rss < MEMORY_BOUND


# --- PostgreSQL ---------------------------------------------------------------------------------

SCHEMA = "attack_concert_singer"


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.skip(f'{name} is not set (run: eval "$(.ci/postgres.sh)")')
    return value


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


@pytest.fixture(scope="module")
def pg_roles(demo_concert_db: Path) -> dict[str, str]:
    """URLs of the copied database for the owner, the read-only role and the superuser."""
    from sqlweave.transfer import copy_sqlite_to_postgres, search_path_url

    owner = _env("SQLWEAVE_PG_URL")
    reader = _env("SQLWEAVE_PG_RO_URL")
    superuser = _env("SQLWEAVE_PG_SUPER_URL")
    reader_role = sa.engine.make_url(reader).username
    url = copy_sqlite_to_postgres(demo_concert_db, owner, schema_name=SCHEMA, readers=[reader_role])
    return {
        "owner": url,
        "read_only": search_path_url(reader, SCHEMA),
        "superuser": search_path_url(superuser, SCHEMA),
    }


_PG_SNAPSHOT = {
    "relations": "SELECT count(*) FROM pg_class",
    "functions": "SELECT count(*) FROM pg_proc",
    "namespaces": "SELECT count(*) FROM pg_namespace",
    "roles": "SELECT string_agg(rolname || rolsuper::text, ',' ORDER BY rolname) FROM pg_roles",
    "databases": "SELECT count(*) FROM pg_database",
    "large_objects": "SELECT count(*) FROM pg_largeobject_metadata",
    "prepared_xacts": "SELECT count(*) FROM pg_prepared_xacts",
    "sequences": "SELECT count(*) FROM pg_sequences",
    "slots": "SELECT coalesce(string_agg(slot_name, ','), '') FROM pg_replication_slots",
    "advisory_locks": "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'",
    "settings_auto_conf": "SELECT count(*) FROM pg_file_settings "
    "WHERE sourcefile LIKE '%%postgresql.auto.conf'",
    "settings_changed": "SELECT string_agg(name || '=' || setting, ',' ORDER BY name) "
    "FROM pg_settings WHERE source NOT IN ('default', 'override', 'client', 'session')",
    "reset_database": "SELECT string_agg(coalesce(stats_reset::text, '-'), ',' ORDER BY datid) "
    "FROM pg_stat_database",
    "reset_bgwriter": "SELECT coalesce(stats_reset::text, '-') FROM pg_stat_bgwriter",
    "reset_archiver": "SELECT coalesce(stats_reset::text, '-') FROM pg_stat_archiver",
    "reset_wal": "SELECT coalesce(stats_reset::text, '-') FROM pg_stat_wal",
    "reset_slru": "SELECT string_agg(coalesce(stats_reset::text, '-'), ',' ORDER BY name) "
    "FROM pg_stat_slru",
}


def _pg_state(conn: sa.Connection) -> dict[str, object]:
    state: dict[str, object] = {
        name: conn.exec_driver_sql(sql).scalar() for name, sql in _PG_SNAPSHOT.items()
    }
    tables = conn.exec_driver_sql(
        f"SELECT tablename FROM pg_tables WHERE schemaname = '{SCHEMA}' ORDER BY 1"
    ).scalars()
    for table in list(tables):
        state[f"table {table}"] = conn.exec_driver_sql(
            f"SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
            f'FROM "{SCHEMA}"."{table}" t'
        ).one()
    conn.rollback()
    return state


def _wal_lsn(conn: sa.Connection) -> str:
    lsn = conn.exec_driver_sql("SELECT pg_current_wal_lsn()::text").scalar_one()
    conn.rollback()
    return lsn


def _wal_growth(conn: sa.Connection, before: str) -> int:
    grown = conn.exec_driver_sql(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %(b)s::pg_lsn)", {"b": before}
    ).scalar_one()
    conn.rollback()
    return int(grown)


@pytest.mark.postgres
def test_postgres_superuser_needs_opt_in(pg_roles: dict[str, str]) -> None:
    with pytest.raises(ExecutionError) as info:
        Database.open(pg_roles["superuser"])
    assert info.value.kind == "connection"
    assert "SUPERUSER" in info.value.message and "allow_superuser" in info.value.message
    with Database.open(pg_roles["superuser"], allow_superuser=True) as db:
        assert db.execute("SELECT count(*) FROM singer").rows == ((6,),)


@pytest.mark.postgres
@pytest.mark.parametrize("role", ["owner", "read_only", "superuser"])
def test_postgres_attacks_change_nothing(pg_roles: dict[str, str], role: str) -> None:
    watcher = _engine(_env("SQLWEAVE_PG_SUPER_URL"))
    # Sessions of other roles that the attacks try to kill or cancel.
    victims = {name: _engine(url).connect() for name, url in pg_roles.items()}
    try:
        pids = {
            name: conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            for name, conn in victims.items()
        }
        victim = pids["superuser" if role != "superuser" else "owner"]
        with watcher.connect() as conn:
            before = _pg_state(conn)
            lsn = _wal_lsn(conn)
        rss = _peak_rss()
        with Database.open(pg_roles[role], allow_superuser=role == "superuser") as db:
            report = run_suite(db, "postgres", f"postgres/{role}", {"victim": str(victim)})
            assert db.execute("SELECT count(*) FROM singer", use_cache=False).rows == ((6,),)
        with watcher.connect() as conn:
            after = _pg_state(conn)
            grown = _wal_growth(conn, lsn)
        _assert_clean(report)
        changed = {k: (before[k], after.get(k)) for k in before if before[k] != after.get(k)}
        assert not changed, changed
        # Read-only work writes (almost) no WAL; other sessions on a shared test server may.
        assert grown < 8 * 1024 * 1024, f"WAL grew by {grown} bytes"
        for name, conn in victims.items():
            assert conn.exec_driver_sql("SELECT 1").scalar_one() == 1, f"{name} session died"
        assert not _no_pwned_files()
        assert _peak_rss() - rss < MEMORY_BOUND
    finally:
        for conn in victims.values():
            conn.close()
        watcher.dispose()
