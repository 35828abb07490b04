"""Adversarial SQL against SQLite: every statement is refused or stopped, no file changes.

Three layers guard untrusted SQL (see :mod:`sqlweave.db`). The suite runs through the public API,
then through each engine layer with the others switched off, and checks byte-identical database
files (sha256) and that no ``-journal`` / ``-wal`` / ``-shm`` file appears — on a copy in a temp
folder and on the bundled Spider file read in place.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import sqlweave.db as dbmod
import sqlweave.db.policy as policy
from sqlweave.db import Database, ExecutionError
from sqlweave.db import sqlite as sqlite_engine

TIMEOUT_S = 1.0
#: How far past its timeout a runaway query may run before it is stopped.
TIMEOUT_MARGIN_S = 0.5

RUNAWAY = {
    "runaway_recursive_cte": (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    ),
    "runaway_cross_join": (
        "SELECT count(*) FROM singer a, singer b, singer c, singer d, singer e, singer f, "
        "singer g, singer h, singer i, singer j, singer k, singer l, singer m, singer n"
    ),
    "runaway_cte_cross_join": (
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 100000) "
        "SELECT count(*) FROM n a, n b, n c"
    ),
}

#: Statements that write, change settings, touch other files or escape the single-query rule.
WRITES = {
    "insert": "INSERT INTO singer (Singer_ID, Name) VALUES (100, 'x')",
    "insert_select": "INSERT INTO singer SELECT * FROM singer",
    "insert_or_replace": "INSERT OR REPLACE INTO singer (Singer_ID, Name) VALUES (1, 'x')",
    "replace": "REPLACE INTO singer (Singer_ID, Name) VALUES (1, 'x')",
    "upsert": (
        "INSERT INTO singer (Singer_ID, Name) VALUES (1, 'x') "
        "ON CONFLICT(Singer_ID) DO UPDATE SET Name = 'y'"
    ),
    "update": "UPDATE singer SET Name = 'x'",
    "update_from": "UPDATE singer SET Age = s.Capacity FROM stadium s",
    "delete": "DELETE FROM singer",
    "delete_returning": "DELETE FROM singer RETURNING *",
    "create_table": "CREATE TABLE pwned (x INTEGER)",
    "create_table_as": "CREATE TABLE pwned AS SELECT * FROM singer",
    "create_index": "CREATE INDEX pwned_idx ON singer (Name)",
    "create_view": "CREATE VIEW pwned_v AS SELECT * FROM singer",
    "create_trigger": (
        "CREATE TRIGGER pwned_t AFTER INSERT ON singer BEGIN DELETE FROM singer; END"
    ),
    "create_temp_table": "CREATE TEMP TABLE pwned (x INTEGER)",
    "create_temp_view": "CREATE TEMP VIEW pwned_v AS SELECT 1",
    "create_virtual_table": "CREATE VIRTUAL TABLE pwned USING fts5(x)",
    "drop_table": "DROP TABLE singer",
    "drop_if_exists": "DROP TABLE IF EXISTS concert",
    "alter_rename": "ALTER TABLE singer RENAME TO pwned",
    "alter_add_column": "ALTER TABLE singer ADD COLUMN pwned INTEGER",
    "attach": "ATTACH DATABASE ':memory:' AS pwned",
    "attach_file_rwc": "ATTACH DATABASE 'file:{tmp}/attached.db?mode=rwc' AS pwned",
    "detach": "DETACH DATABASE main",
    "pragma_journal_mode": "PRAGMA journal_mode = WAL",
    "pragma_writable_schema": "PRAGMA writable_schema = ON",
    "pragma_user_version": "PRAGMA user_version = 7",
    "pragma_read": "PRAGMA table_info(singer)",
    "pragma_function_in_select": "SELECT * FROM pragma_table_info('singer')",
    "pragma_function_no_args": "SELECT * FROM pragma_database_list",
    "pragma_function_joined": "SELECT s.name FROM sqlite_master m, pragma_index_list(m.name) s",
    "two_statements": "SELECT 1; DROP TABLE singer",
    "two_statements_no_space": "SELECT 1;DELETE FROM singer;",
    "comment_hides_nothing": "SELECT 1 /* harmless */; DROP TABLE singer",
    "line_comment_then_write": "SELECT 1 -- comment\n; DELETE FROM singer",
    "comment_first": "/* SELECT */ DELETE FROM singer",
    "vacuum": "VACUUM",
    "vacuum_into": "VACUUM INTO '{tmp}/vacuumed.db'",
    "reindex": "REINDEX",
    "analyze": "ANALYZE",
    "load_extension": "SELECT load_extension('{tmp}/evil.so')",
    "load_extension_nested": "SELECT name FROM singer WHERE load_extension('x') IS NULL",
    "fts3_tokenizer": "SELECT fts3_tokenizer('simple')",
    "readfile": "SELECT readfile('/etc/passwd')",
    "writefile": "SELECT writefile('{tmp}/written.txt', 'x')",
    "begin": "BEGIN",
    "begin_immediate": "BEGIN IMMEDIATE",
    "commit": "COMMIT",
    "rollback": "ROLLBACK",
    "savepoint": "SAVEPOINT sp",
    "release": "RELEASE sp",
    "select_into": "SELECT * INTO pwned FROM singer",
    "data_modifying_cte": "WITH d AS (DELETE FROM singer RETURNING *) SELECT * FROM d",
    "cte_then_insert": "WITH x AS (SELECT 1) INSERT INTO singer (Singer_ID) SELECT 1 FROM x",
    "cte_then_update": "WITH x AS (SELECT 1) UPDATE singer SET Name = 'x'",
    "select_for_update": "SELECT * FROM singer FOR UPDATE",
    "explain_write": "EXPLAIN DELETE FROM singer",
}

ALL = {**WRITES, **RUNAWAY}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sidecars(path: Path) -> list[Path]:
    return [p for p in (Path(f"{path}{s}") for s in ("-journal", "-wal", "-shm")) if p.exists()]


def _fill(sql: str, tmp: Path) -> str:
    return sql.replace("{tmp}", str(tmp))


@pytest.fixture(scope="module")
def bundled(spider_root: Path) -> Path:
    path = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    if not path.is_file():
        pytest.skip("concert_singer is not bundled")
    return path


@pytest.fixture
def copy(bundled: Path, tmp_path: Path) -> Path:
    target = tmp_path / "concert_singer.sqlite"
    shutil.copyfile(bundled, target)
    target.chmod(0o644)  # writable, so only our guards stand in the way
    return target


@pytest.fixture
def guarded(copy: Path) -> Iterator[tuple[Database, Path, str]]:
    before = _sha256(copy)
    with Database.open(copy) as db:
        yield db, copy, before


def _assert_untouched(path: Path, before: str, tmp: Path) -> None:
    assert _sha256(path) == before, f"{path} changed"
    assert not _sidecars(path), f"side files appeared: {_sidecars(path)}"
    for name in ("attached.db", "vacuumed.db", "written.txt"):
        assert not (tmp / name).exists(), f"{name} was written"


def test_suite_is_large_enough() -> None:
    assert len(ALL) >= 40


# --- all layers together ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(WRITES))
def test_write_is_refused(name: str, guarded: tuple[Database, Path, str], tmp_path: Path) -> None:
    db, path, before = guarded
    err = db.try_execute(_fill(WRITES[name], tmp_path), timeout_s=TIMEOUT_S)
    assert isinstance(err, ExecutionError), f"{name} ran: {err}"
    assert err.kind in ("not_read_only", "syntax"), f"{name}: {err}"
    assert err.feedback()
    # The handle still works and the data is intact.
    assert db.execute("SELECT count(*) FROM singer", use_cache=False).rows == ((6,),)
    _assert_untouched(path, before, tmp_path)


@pytest.mark.parametrize("name", sorted(RUNAWAY))
def test_runaway_query_is_stopped_in_time(
    name: str, guarded: tuple[Database, Path, str], tmp_path: Path
) -> None:
    db, path, before = guarded
    start = time.perf_counter()
    err = db.try_execute(RUNAWAY[name], timeout_s=TIMEOUT_S)
    elapsed = time.perf_counter() - start
    assert isinstance(err, ExecutionError) and err.kind == "timeout", err
    assert elapsed <= TIMEOUT_S + TIMEOUT_MARGIN_S, f"{name} ran {elapsed:.2f} s"
    _assert_untouched(path, before, tmp_path)


def test_bundled_file_in_place_is_byte_identical(bundled: Path, tmp_path: Path) -> None:
    """The whole suite against the shared bundled file itself, not a copy."""
    before = _sha256(bundled)
    stat_before = bundled.stat()
    outcomes: dict[str, str] = {}
    with Database.open(bundled) as db:
        for name, sql in ALL.items():
            result = db.try_execute(_fill(sql, tmp_path), timeout_s=TIMEOUT_S)
            assert isinstance(result, ExecutionError), f"{name} ran"
            outcomes[name] = result.kind
        assert db.execute("SELECT count(*) FROM singer").rows == ((6,),)
    assert _sha256(bundled) == before
    assert bundled.stat().st_mtime_ns == stat_before.st_mtime_ns
    assert not _sidecars(bundled)
    assert {k for k, v in outcomes.items() if v == "timeout"} == set(RUNAWAY)


# --- each engine layer alone ------------------------------------------------------------------------


@pytest.fixture
def no_sqlglot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch off layer 1, so only the engine guards stand."""
    monkeypatch.setattr(policy, "check_read_only", lambda sql, dialect="sqlite": None)


@pytest.mark.usefixtures("no_sqlglot")
@pytest.mark.parametrize("name", sorted(ALL))
def test_engine_guards_alone_refuse(
    name: str, guarded: tuple[Database, Path, str], tmp_path: Path
) -> None:
    """Without the sqlglot check, the authorizer + mode=ro + progress handler still hold."""
    db, path, before = guarded
    err = db.try_execute(_fill(ALL[name], tmp_path), timeout_s=TIMEOUT_S)
    if name == "pragma_read":
        # A read-only PRAGMA is still denied by the authorizer.
        assert isinstance(err, ExecutionError) and err.kind == "not_read_only"
    assert isinstance(err, ExecutionError), f"{name} ran with only the engine guards: {err}"
    _assert_untouched(path, before, tmp_path)


def _raw(
    path: Path, *, read_only: bool, authorizer: Callable[..., int] | None
) -> sqlite3.Connection:
    uri = f"{path.resolve().as_uri()}{'?mode=ro' if read_only else ''}"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    if authorizer is not None:
        conn.set_authorizer(authorizer)
    return conn


@pytest.mark.parametrize("name", sorted(WRITES))
def test_authorizer_alone_refuses_writes(name: str, copy: Path, tmp_path: Path) -> None:
    """A writable connection with only the untrusted authorizer: nothing gets written."""
    before = _sha256(copy)
    conn = _raw(copy, read_only=False, authorizer=sqlite_engine._untrusted_authorizer)
    try:
        with pytest.raises(sqlite3.Error):
            conn.execute(_fill(WRITES[name], tmp_path)).fetchall()
    finally:
        conn.close()
    _assert_untouched(copy, before, tmp_path)


#: What ``mode=ro`` alone cannot stop: they write *other* files, never the database itself.
#: The authorizer denies both (see test_authorizer_alone_refuses_writes).
_RO_WRITES_ELSEWHERE = {"attach_file_rwc", "vacuum_into"}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_mode_ro_alone_keeps_the_file_intact(name: str, copy: Path, tmp_path: Path) -> None:
    """A read-only open with no authorizer: writes to the database file fail."""
    before = _sha256(copy)
    conn = _raw(copy, read_only=True, authorizer=None)
    try:
        statements = [s for s in _fill(WRITES[name], tmp_path).split(";") if s.strip()]
        for sql in statements:
            try:
                conn.execute(sql).fetchall()
            except sqlite3.Error:
                pass
        # Whatever ran, the file is unchanged; temp objects die with the connection.
        count = conn.execute("SELECT count(*) FROM main.singer").fetchone()
    finally:
        conn.close()
    assert _sha256(copy) == before
    assert not _sidecars(copy)
    if name not in _RO_WRITES_ELSEWHERE and "drop" not in name and "delete" not in name:
        assert count == (6,)


def test_mode_ro_refuses_direct_writes(copy: Path) -> None:
    conn = _raw(copy, read_only=True, authorizer=None)
    try:
        for sql in (WRITES["insert"], WRITES["delete"], WRITES["create_table"], WRITES["analyze"]):
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                conn.execute(sql)
    finally:
        conn.close()


def test_progress_handler_alone_stops_runaway(copy: Path, no_sqlglot: None) -> None:
    with Database.open(copy) as db:
        for sql in RUNAWAY.values():
            start = time.perf_counter()
            err = db.try_execute(sql, timeout_s=0.3)
            assert isinstance(err, ExecutionError) and err.kind == "timeout"
            assert time.perf_counter() - start <= 0.3 + TIMEOUT_MARGIN_S


def test_reads_still_work(guarded: tuple[Database, Path, str]) -> None:
    """The guards do not get in the way of ordinary gold-style queries."""
    db, _, _ = guarded
    assert db.execute(
        "SELECT T2.Name, count(*) FROM concert AS T1 JOIN stadium AS T2 "
        "ON T1.Stadium_ID = T2.Stadium_ID GROUP BY T1.Stadium_ID ORDER BY 2 DESC, 1 LIMIT 1"
    ).rows
    assert db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").rows
    assert db.execute("SELECT count(*) FROM singer WHERE Name GLOB 'J*' OR Name LIKE 't%'").rows


# --- threads, opening, limits (issue 19) ------------------------------------------------------------


def _run_threads(n: int, target: Callable[[int], None], timeout_s: float) -> list[threading.Thread]:
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    return [t for t in threads if t.is_alive()]


def test_eight_threads_introspect_one_fresh_database_20_times(
    bundled: Path, tmp_path: Path
) -> None:
    """The shared introspection connection deadlocked (authorizer vs GIL); now 20 clean runs."""
    from sqlweave import schema as schema_mod

    for run in range(20):
        path = tmp_path / f"fresh{run}.sqlite"
        shutil.copyfile(bundled, path)
        schema_mod.clear_cache()
        with Database.open(path) as db:
            barrier = threading.Barrier(8)
            got: dict[int, object] = {}

            def work(
                i: int,
                db: Database = db,
                barrier: threading.Barrier = barrier,
                got: dict[int, object] = got,
            ) -> None:
                barrier.wait()
                got[i] = schema_mod.introspect(db)

            stuck = _run_threads(8, work, timeout_s=30)
            assert not stuck, f"run {run}: {len(stuck)} threads hung"
            assert len({id(s) for s in got.values()}) == 1  # built once, shared
    schema_mod.clear_cache()


def test_close_during_queries_does_not_crash(copy: Path) -> None:
    db = Database.open(copy)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        for _ in range(30):
            try:
                db.execute(RUNAWAY["runaway_cte_cross_join"], timeout_s=0.2, use_cache=False)
            except ExecutionError:
                pass
            except BaseException as err:  # anything else is a bug
                errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for _ in range(20):
        time.sleep(0.05)
        db.close()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert db.execute("SELECT count(*) FROM singer", use_cache=False).rows == ((6,),)
    db.close()
    assert db.open_connections == 0


def test_connections_are_bounded_across_many_threads(copy: Path) -> None:
    fds = Path("/proc/self/fd")
    before = len(list(fds.iterdir())) if fds.is_dir() else 0
    with Database.open(copy) as db:
        for start in range(0, 2000, 100):
            threads = [
                threading.Thread(target=db.execute, args=(f"SELECT {start + i}",))
                for i in range(100)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert db.open_connections <= dbmod.SQLITE_MAX_IDLE
        if fds.is_dir():
            assert len(list(fds.iterdir())) - before <= dbmod.SQLITE_MAX_IDLE + 4


def test_wal_mode_file_opens_without_side_files(tmp_path: Path, bundled: Path) -> None:
    path = tmp_path / "wal.sqlite"
    shutil.copyfile(bundled, path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
    conn.close()  # checkpoints and removes -wal / -shm
    assert not _sidecars(path)
    before = _sha256(path)
    with Database.open(path) as db:
        assert db.execute("SELECT count(*) FROM singer").rows == ((6,),)
        from sqlweave.schema import introspect

        assert introspect(db, sample_rows=1, distinct_values=1).tables
        assert not _sidecars(path), _sidecars(path)
    assert not _sidecars(path)
    assert _sha256(path) == before


@pytest.mark.parametrize("timeout_s", [float("nan"), -1.0, 0.0, float("inf")])
def test_bad_timeouts_are_rejected(guarded: tuple[Database, Path, str], timeout_s: float) -> None:
    db, _, _ = guarded
    with pytest.raises(ValueError, match="timeout_s"):
        db.execute("SELECT 1", timeout_s=timeout_s)


def test_parse_time_counts_inside_the_timeout(guarded: tuple[Database, Path, str]) -> None:
    """An OR chain just under the length cap: parse + run stays within timeout + 1 s.

    The timeout (10 ms) is below the parse alone (~50 ms with sqlglot's compiled extensions,
    ~120 ms without), so the verdict is a timeout only if parsing counts against it.
    """
    db, _, _ = guarded
    sql = "SELECT count(*) FROM singer WHERE Singer_ID = 0"
    n = 1
    while len(sql) < dbmod.MAX_SQL_CHARS - 30:
        sql += f" OR Singer_ID = {n}"
        n += 1
    start = time.monotonic()
    outcome = db.try_execute(sql, timeout_s=0.01, use_cache=False)
    elapsed = time.monotonic() - start
    assert elapsed <= 0.01 + 1.0
    assert isinstance(outcome, ExecutionError) and outcome.kind == "timeout", outcome
    # Over the cap: refused at once, before any parsing.
    start = time.monotonic()
    err = db.try_execute(sql + " OR 1" * 100_000, timeout_s=30)
    assert isinstance(err, ExecutionError) and "too long" in err.message
    assert time.monotonic() - start < 1.0


def test_results_are_capped_in_bytes(guarded: tuple[Database, Path, str]) -> None:
    db, _, _ = guarded
    sql = "SELECT printf('%.*c', 900000, 'a') FROM singer a, singer b"  # 36 rows x 0.9 MB
    result = db.execute(sql, max_bytes=5_000_000)
    assert result.truncated and 1 <= len(result) <= 6
    assert len(db.execute(sql, max_bytes=None).rows) == 36


def test_corrupted_file_is_a_clear_connection_error(bundled: Path, tmp_path: Path) -> None:
    path = tmp_path / "corrupt.sqlite"
    data = bytearray(bundled.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the schema page, header intact
    path.write_bytes(bytes(data))
    with pytest.raises(ExecutionError) as info:
        Database.open(path)
    assert info.value.kind == "connection" and "corrupt" in info.value.message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://user:secret@host:notaport/db",
        "postgresql://user:secret@[::1/db",
        "duckdb:///",
        "sqlite:///:memory:",
        "nonsense+driver://x",
        "://missing-scheme",
    ],
)
def test_malformed_urls_are_clear_connection_errors(url: str) -> None:
    with pytest.raises(ExecutionError) as info:
        Database.open(url)
    assert info.value.kind == "connection"
    assert "secret" not in info.value.message
    assert "\n" not in info.value.message


def test_harmless_sqlite_reads_run(guarded: tuple[Database, Path, str]) -> None:
    db, _, _ = guarded
    assert db.execute("VALUES (1, 2)").rows == ((1, 2),)
    assert db.execute("SELECT value FROM json_each('[1, 2]')").rows == ((1,), (2,))


def test_duckdb_setseed_does_not_persist(copy: Path, tmp_path: Path) -> None:
    pytest.importorskip("duckdb_engine")
    from sqlweave.transfer import copy_sqlite_to_duckdb

    path = copy_sqlite_to_duckdb(copy, tmp_path / "c.duckdb")
    with Database.open(f"duckdb:///{path}") as db:
        refused = db.try_execute("SELECT setseed(0.5)")
        assert isinstance(refused, ExecutionError) and refused.kind == "not_read_only"
        # Even past the query check, the seed does not outlive its query on the pooled connection.
        original = policy.check_read_only
        policy.check_read_only = lambda sql, dialect="sqlite": None  # type: ignore[assignment]
        try:
            draws = set()
            for _ in range(3):
                db.execute("SELECT setseed(0.5)", use_cache=False)
                draws.add(db.execute("SELECT random()", use_cache=False).rows[0][0])
        finally:
            policy.check_read_only = original
        assert len(draws) == 3
        for sql in ("DESCRIBE singer", "SUMMARIZE singer", "VALUES (1)"):
            assert db.execute(sql).rows, sql
        assert db.execute("PIVOT singer ON Country IN ('France') USING count(*)").columns
        # Without its values DuckDB plans a column per distinct value, uninterruptibly.
        dynamic = db.try_execute("PIVOT singer ON Country USING count(*)")
        assert isinstance(dynamic, ExecutionError) and "IN (...)" in dynamic.message


def test_ctrl_c_during_a_sqlite_query_is_the_users_not_a_timeout(tmp_path: Path) -> None:
    """SQLite turns a KeyboardInterrupt raised in its progress handler into "interrupted",
    which read as a timeout: Ctrl-C was recorded as the query's failure and the run went on."""
    import os
    import signal
    import threading
    import time

    from conftest import DEMO_CONCERT_DB

    endless = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    )
    with Database.open(DEMO_CONCERT_DB) as db:
        timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
        timer.start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            db.execute(endless, timeout_s=30, use_cache=False)
        assert time.monotonic() - start < 5
        late = db.try_execute(endless, timeout_s=0.3, use_cache=False)  # a deadline still is one
        assert isinstance(late, ExecutionError) and late.kind == "timeout"


def test_a_duckdb_copy_over_its_own_source_is_refused(tmp_path: Path) -> None:
    """Found by review: the copy deleted its target first, which was the SQLite source."""
    import sqlite3

    pytest.importorskip("duckdb")
    from sqlweave.transfer import copy_sqlite_to_duckdb

    path = tmp_path / "same.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(ValueError, match="cannot be written over it"):
        copy_sqlite_to_duckdb(path, path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT x FROM t").fetchall() == [(1,)]
    target = copy_sqlite_to_duckdb(path, tmp_path / "copy.duckdb")
    assert target.is_file() and not list(tmp_path.glob(".*partial*"))
