"""Unit tests of sqlweave.db: results, caching, row caps, error kinds and feedback, threads."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import sqlweave.db.policy as policy
from sqlweave.db import (
    VERDICT_CACHE_MAX_CHARS,
    Database,
    ExecutionError,
    QueryResult,
    check_read_only,
    classify_error,
)
from sqlweave.db import fetch as fetchmod
from sqlweave.db import watchdog as watchdogmod

RUNAWAY_CTE = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
)


def _make_db(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, city TEXT);
        CREATE TABLE pets (pet_id INTEGER PRIMARY KEY, owner_id INTEGER, kind TEXT, weight REAL);
        """
    )
    conn.executemany(
        "INSERT INTO people VALUES (?, ?, ?, ?)",
        [(i, f"person{i}", 20 + i % 30, "Paris" if i % 2 else "Oslo") for i in range(1, 51)],
    )
    conn.executemany(
        "INSERT INTO pets VALUES (?, ?, ?, ?)",
        [(1, 1, "dog", 12.5), (2, 1, "cat", 4.0), (3, 2, "dog", 30.25)],
    )
    # Invalid UTF-8, as some benchmark databases hold.
    conn.execute("INSERT INTO people VALUES (99, CAST(X'C328' AS TEXT), 40, 'Bergen')")
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return _make_db(tmp_path / "tiny.sqlite")


@pytest.fixture
def db(db_path: Path) -> Iterator[Database]:
    with Database.open(db_path) as handle:
        yield handle


# --- results --------------------------------------------------------------------------------------


def test_execute_returns_columns_and_rows(db: Database) -> None:
    result = db.execute("SELECT name, age FROM people WHERE id <= 2 ORDER BY id")
    assert isinstance(result, QueryResult)
    assert result.columns == ("name", "age")
    assert result.rows == (("person1", 21), ("person2", 22))
    assert len(result) == 2
    assert not result.truncated
    assert result.elapsed_s >= 0


def test_preview_is_compact(db: Database) -> None:
    text = db.execute("SELECT id, name FROM people ORDER BY id").preview(max_rows=2)
    lines = text.splitlines()
    assert lines[0] == "id | name"
    assert lines[1] == "1 | person1"
    assert "51 rows in total" in lines[-1]
    assert db.execute("SELECT * FROM pets WHERE 0").preview().endswith("(no rows)")


def test_like_with_percent_and_glob_operator(db: Database) -> None:
    # GLOB is an operator that calls SQLite's glob() function; the authorizer must allow it.
    assert db.execute("SELECT count(*) FROM people WHERE name LIKE 'person1%'").rows == ((11,),)
    assert db.execute("SELECT count(*) FROM people WHERE name GLOB 'person1*'").rows == ((11,),)


def test_invalid_utf8_is_decoded_leniently(db: Database) -> None:
    (value,) = db.execute("SELECT name FROM people WHERE id = 99").rows[0]
    assert isinstance(value, str) and "\ufffd" in value


def test_check_read_only_returns_the_tree() -> None:
    tree = check_read_only("SELECT a FROM t UNION SELECT b FROM u")
    assert tree.key == "union"


# --- caching --------------------------------------------------------------------------------------


def test_successful_results_are_cached(db: Database) -> None:
    sql = "SELECT count(*) FROM people"
    first = db.execute(sql)
    assert db.execute(sql) is first
    assert db.execute("  " + sql + "\n") is first  # keyed on the stripped text
    assert db.execute(sql, use_cache=False) is not first
    assert db.execute(sql, max_rows=5) is not first  # the row cap is part of the key
    db.clear_cache()
    assert db.execute(sql) is not first


def test_errors_are_not_cached(db: Database) -> None:
    sql = "SELECT nope FROM people"
    assert isinstance(db.try_execute(sql), ExecutionError)
    assert isinstance(db.try_execute(sql), ExecutionError)


def test_read_only_verdicts_are_cached_per_text(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def check(sql: str, dialect: str = "sqlite") -> None:
        calls.append(sql)

    monkeypatch.setattr(policy, "check_read_only", check)
    sql = "SELECT count(*) FROM pets WHERE pet_id > 1 -- verdict cache"
    long_sql = f"SELECT count(*) FROM pets /* {'x' * VERDICT_CACHE_MAX_CHARS} */"
    for _ in range(2):
        db.execute(sql, use_cache=False)
        db.execute(long_sql, use_cache=False)
    # Checked once; a text too long for the cache every time.
    assert calls == [sql, long_sql, long_sql]


def test_a_replaced_check_never_shares_verdicts(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    sql = "SELECT count(*) FROM pets; SELECT 1 -- replaced check"
    with monkeypatch.context() as patch:
        patch.setattr(policy, "check_read_only", lambda sql, dialect="sqlite": None)
        bypassed = db.try_execute(sql)
    assert isinstance(bypassed, ExecutionError) and bypassed.kind != "not_read_only"
    refused = db.try_execute(sql)
    assert isinstance(refused, ExecutionError) and refused.kind == "not_read_only"


def test_cached_refusals_are_raised_again(db: Database) -> None:
    for sql in ("DELETE FROM people", "SELECT name FROM people WHRE age > 3"):
        first, again = db.try_execute(sql), db.try_execute(sql)
        assert isinstance(first, ExecutionError) and isinstance(again, ExecutionError)
        assert (again.kind, again.message, again.sql) == (first.kind, first.message, sql)
        assert again is not first


# --- row caps -------------------------------------------------------------------------------------


def test_max_rows_truncates_and_flags(db: Database) -> None:
    result = db.execute("SELECT id FROM people ORDER BY id", max_rows=10)
    assert len(result) == 10 and result.truncated
    assert result.rows[-1] == (10,)
    assert "10+ rows in total" in result.preview()


def test_max_rows_exact_fit_is_not_truncated(db: Database) -> None:
    result = db.execute("SELECT pet_id FROM pets", max_rows=3)
    assert len(result) == 3 and not result.truncated


def test_max_rows_none_returns_everything(db: Database) -> None:
    result = db.execute("SELECT id FROM people", max_rows=None)
    assert len(result) == 51 and not result.truncated


class _Cursor:
    def __init__(self, rows: list[tuple]) -> None:
        self._rows = rows

    def fetchmany(self, n: int) -> list[tuple]:
        out, self._rows = self._rows[:n], self._rows[n:]
        return out


def _fetch_value_by_value(rows: list[tuple], max_rows: int | None, max_bytes: int | None):
    """The caps as specified: every value normalised and sized, the cut at the first row that
    goes over either cap."""
    kept: list[tuple] = []
    size = 0
    for r in rows:
        row = fetchmod._normalize_row(r)
        size += sum(fetchmod._value_bytes(v) for v in row)
        if (max_rows is not None and len(kept) >= max_rows) or (
            max_bytes is not None and size > max_bytes
        ):
            return tuple(kept), True
        kept.append(row)
    return tuple(kept), False


def test_batched_fetch_matches_the_value_by_value_caps() -> None:
    from decimal import Decimal

    plain = [(i, f"name{i}" * (i % 5), None if i % 3 else 2.5, b"x" * (i % 4)) for i in range(3000)]
    # SQLite types each value: text with NULL or with numbers in one column.
    mixed = [(i if i % 2 else str(i), None if i % 7 else "t" * (i % 9), True) for i in range(700)]
    odd = [(i, memoryview(b"ab"), Decimal("1.5"), [1, 2]) for i in range(40)]
    for rows in (plain, mixed, odd, plain[:5] + odd[:3] + plain[5:1500], [], [()] * 10):
        for max_rows in (None, 0, 1, 3, 500, 1023, 1024, 2999, 3000, 5000):
            for max_bytes in (None, 0, 16, 100, 10_000, 60_000, 10**9):
                got = fetchmod.fetch(_Cursor(rows), max_rows, max_bytes)
                want = _fetch_value_by_value(rows, max_rows, max_bytes)
                assert got == want, (len(rows), max_rows, max_bytes)
                assert [tuple(map(type, r)) for r in got[0]] == [
                    tuple(map(type, r)) for r in want[0]
                ]


# --- errors and feedback --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "kind", "feedback_start", "mentions"),
    [
        ("SELECT salary FROM people", "unknown_column", "Unknown column:", "salary"),
        ("SELECT * FROM employees", "unknown_table", "Unknown table:", "employees"),
        ("SELECT name FROM people WHERE", "syntax", "Syntax error:", ""),
        ("SELECT name FROM people WHRE age > 3", "syntax", "Syntax error:", ""),
        ("DELETE FROM people", "not_read_only", "Refused (only read-only", "DELETE"),
        ("SELECT 1; DROP TABLE people", "not_read_only", "Refused (only read-only", "statement"),
        ("", "syntax", "Syntax error:", "empty"),
    ],
)
def test_error_kinds_and_feedback(
    db: Database, sql: str, kind: str, feedback_start: str, mentions: str
) -> None:
    err = db.try_execute(sql)
    assert isinstance(err, ExecutionError), err
    assert err.kind == kind
    assert err.sql == sql.strip()
    assert err.feedback().startswith(feedback_start)
    assert mentions.lower() in err.feedback().lower()
    assert err.as_dict() == {"kind": kind, "message": err.message}
    with pytest.raises(ExecutionError):
        db.execute(sql)


def test_timeout_is_real_and_reported(db: Database) -> None:
    start = time.perf_counter()
    err = db.try_execute(RUNAWAY_CTE, timeout_s=0.5)
    elapsed = time.perf_counter() - start
    assert isinstance(err, ExecutionError) and err.kind == "timeout"
    assert err.feedback() == "Timed out: query did not finish within 0.5 s"
    assert elapsed < 0.5 + 0.5
    # The connection is usable afterwards.
    assert db.execute("SELECT count(*) FROM pets").rows == ((3,),)


def test_blob_size_is_capped(db: Database) -> None:
    err = db.try_execute("SELECT length(randomblob(500000000))")
    assert isinstance(err, ExecutionError) and err.kind == "runtime"
    assert "too big" in err.message


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("no such column: foo", "unknown_column"),
        ('column "foo" does not exist', "unknown_column"),
        ("no such table: bar", "unknown_table"),
        ('relation "bar" does not exist', "unknown_table"),
        ('near "FROM": syntax error', "syntax"),
        ("interrupted", "timeout"),
        ("canceling statement due to statement timeout", "timeout"),
        ("attempt to write a readonly database", "not_read_only"),
        ("cannot execute INSERT in a read-only transaction", "not_read_only"),
        ("permission denied for function pg_read_file", "not_read_only"),
        ("not authorized", "not_read_only"),
        ("division by zero", "runtime"),
    ],
)
def test_classify_error(message: str, kind: str) -> None:
    assert classify_error(message) == kind


# --- opening --------------------------------------------------------------------------------------


def test_missing_file_is_a_connection_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "missing.sqlite"
    for target in (missing, str(missing), f"sqlite:///{missing}"):
        with pytest.raises(ExecutionError) as info:
            Database.open(target)
        assert info.value.kind == "connection"
        assert "not found" in info.value.message and "missing.sqlite" in info.value.message
        assert info.value.feedback().startswith("Database unavailable:")
    assert not missing.parent.exists()  # opening never creates anything


def test_non_sqlite_file_is_a_connection_error(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.sqlite"
    bogus.write_text("just some text, not a database\n")
    with pytest.raises(ExecutionError) as info:
        Database.open(bogus)
    assert info.value.kind == "connection"
    assert "not a SQLite database" in info.value.message


def test_memory_and_unknown_backends_are_refused() -> None:
    with pytest.raises(ExecutionError) as info:
        Database.open("sqlite://")
    assert info.value.kind == "connection"
    with pytest.raises(ExecutionError) as info:
        Database.open("mysql://u:p@localhost/db")
    assert info.value.kind == "connection" and "mysql" in info.value.message


def test_sqlite_url_and_name(db_path: Path) -> None:
    with Database.open(f"sqlite:///{db_path}", name="tiny_db") as handle:
        assert handle.name == "tiny_db" and handle.dialect == "sqlite"
        assert handle.execute("SELECT count(*) FROM pets").rows == ((3,),)
        assert len(handle.fingerprint) == 16
        assert handle.fingerprint == Database.open(db_path).fingerprint


# --- threads --------------------------------------------------------------------------------------


def test_threads_get_their_own_connections(db: Database) -> None:
    n = 6
    barrier = threading.Barrier(n)
    results: dict[int, object] = {}

    def work(i: int) -> None:
        barrier.wait()
        if i == 0:
            # One thread runs away; the others must not be stopped or slowed by its handler.
            results[i] = db.try_execute(RUNAWAY_CTE, timeout_s=1.0)
        else:
            results[i] = [
                db.execute(f"SELECT count(*) FROM people WHERE id > {i * 7 + k}", use_cache=False)
                for k in range(20)
            ]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    runaway = results[0]
    assert isinstance(runaway, ExecutionError) and runaway.kind == "timeout"
    for i in range(1, n):
        counts = [r.rows[0][0] for r in results[i]]  # type: ignore[union-attr]
        assert counts == [51 - min(50, i * 7 + k) for k in range(20)]
    # Each running query had a connection of its own; finished ones wait idle for reuse.
    assert 1 <= db.open_connections <= n


def test_watchdog_fires_an_earlier_deadline_armed_later() -> None:
    watchdog = watchdogmod._Watchdog()
    fired: list[str] = []
    now = time.monotonic()
    late = watchdog.arm(now + 60, lambda: fired.append("late"))
    watchdog.arm(now + 0.2, lambda: fired.append("early"))  # must wake the waiting thread
    watchdog.arm(now + 0.4, lambda: fired.append("next"))  # it wakes for this one by itself
    stale = watchdog.arm(now + 0.3, lambda: fired.append("stale"))
    assert watchdog.disarm(stale) is False
    deadline = time.monotonic() + 10
    while len(fired) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fired == ["early", "next"]
    assert time.monotonic() - now < 2.0
    assert watchdog.disarm(late) is False


def test_close_closes_every_connection(db_path: Path) -> None:
    handle = Database.open(db_path)
    t = threading.Thread(target=lambda: handle.execute("SELECT 1"))
    t.start()
    t.join()
    handle.execute("SELECT 2")
    assert handle.open_connections >= 1
    handle.close()
    assert handle.open_connections == 0
    # A closed handle reopens lazily.
    assert handle.execute("SELECT 3", use_cache=False).rows == ((3,),)
    handle.close()


# --- DuckDB ---------------------------------------------------------------------------------------


def test_duckdb_copy_query_and_timeout(db_path: Path, tmp_path: Path) -> None:
    pytest.importorskip("duckdb_engine")
    from sqlweave.transfer import copy_sqlite_to_duckdb

    target = copy_sqlite_to_duckdb(db_path, tmp_path / "tiny.duckdb")
    with Database.open(f"duckdb:///{target}") as handle:
        assert handle.dialect == "duckdb"
        assert handle.execute("SELECT count(*) FROM People").rows == ((51,),)
        assert handle.execute("SELECT kind FROM pets WHERE weight > 20").rows == (("dog",),)
        start = time.perf_counter()
        err = handle.try_execute("SELECT count(*) FROM range(100000000000) t(a)", timeout_s=0.5)
        assert isinstance(err, ExecutionError) and err.kind == "timeout"
        assert time.perf_counter() - start < 0.5 + 1.0
        for sql in (
            "DELETE FROM pets",
            "SELECT 1; DROP TABLE pets",
            f"COPY pets TO '{tmp_path / 'out.csv'}'",
            "SELECT * FROM read_csv('/etc/hostname')",
        ):
            refused = handle.try_execute(sql)
            assert isinstance(refused, ExecutionError) and refused.kind == "not_read_only", sql
        assert handle.execute("SELECT count(*) FROM pets").rows == ((3,),)
    assert not (tmp_path / "out.csv").exists()
