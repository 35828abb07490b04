"""PostgreSQL on a real server: copying Spider databases in, gold queries, adversarial SQL.

Needs ``SQLWEAVE_PG_URL`` (an owner role that may create schemas), as ``.ci/postgres.sh``
exports; the tests skip when it is unset. ``SQLWEAVE_PG_RO_URL`` (a SELECT-only role), when set,
gets the adversarial suite too.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import sqlweave.db as dbmod
from sqlweave.db import Database, ExecutionError
from sqlweave.metrics import has_top_level_order_by, results_match
from sqlweave.transfer import (
    copy_sqlite_to_postgres,
    plan_tables,
    search_path_url,
    to_postgres_sql,
)

pytestmark = pytest.mark.postgres

SCHEMA = "test_concert_singer"
TIMEOUT_S = 1.0
#: Where an attack that escaped would write (the machine's temporary folder).
PWNED = Path(tempfile.gettempdir()) / "sqlweave_pwned"


@pytest.fixture(scope="module")
def pg_url() -> str:
    url = os.environ.get("SQLWEAVE_PG_URL")
    if not url:
        pytest.skip('SQLWEAVE_PG_URL is not set (run: eval "$(.ci/postgres.sh)")')
    return url


@pytest.fixture(scope="module")
def source(spider_root: Path) -> Path:
    path = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    if not path.is_file():
        pytest.skip("concert_singer is not bundled")
    return path


@pytest.fixture(scope="module")
def copied(pg_url: str, source: Path) -> str:
    """concert_singer copied into the server; the URL (owner role) to query it."""
    return copy_sqlite_to_postgres(source, pg_url, schema_name=SCHEMA)


@pytest.fixture(scope="module")
def pg(copied: str) -> Iterator[Database]:
    with Database.open(copied, name="concert_singer") as db:
        yield db


def _fingerprint(url: str) -> dict[str, tuple[int, str]]:
    """Row count and an order-independent checksum of every table in the schema."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            tables = conn.execute(
                sa.text("SELECT tablename FROM pg_tables WHERE schemaname = :s ORDER BY 1"),
                {"s": SCHEMA},
            ).scalars()
            out = {}
            for table in list(tables):
                row = conn.execute(
                    sa.text(
                        f"SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY "
                        f't::text), \'\')) FROM "{SCHEMA}"."{table}" t'
                    )
                ).one()
                out[table] = (row[0], row[1])
            out["<relations>"] = (
                conn.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_class c JOIN pg_namespace n "
                        "ON n.oid = c.relnamespace WHERE n.nspname = :s"
                    ),
                    {"s": SCHEMA},
                ).scalar_one(),
                "",
            )
            out["<advisory locks>"] = (
                conn.execute(
                    sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
                ).scalar_one(),
                "",
            )
            out["<pwned tables>"] = (
                conn.execute(
                    sa.text("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'pwned%'")
                ).scalar_one(),
                "",
            )
        return out
    finally:
        engine.dispose()


# --- the copy -----------------------------------------------------------------------------------


def test_copy_is_complete_and_lower_cased(copied: str, source: Path, pg: Database) -> None:
    assert "options=-csearch_path" in copied
    with sqlite3.connect(f"{source.as_uri()}?mode=ro", uri=True) as conn:
        for plan in plan_tables(source):
            (n,) = conn.execute(f'SELECT count(*) FROM "{plan.source}"').fetchone()
            assert pg.execute(f"SELECT count(*) FROM {plan.name}").rows == ((n,),)
            assert plan.name == plan.name.lower()
    cols = pg.execute("SELECT * FROM singer LIMIT 1").columns
    assert cols == tuple(c.lower() for c in cols)


def test_copy_is_idempotent(pg_url: str, source: Path, copied: str) -> None:
    before = _fingerprint(copied)
    again = copy_sqlite_to_postgres(source, pg_url, schema_name=SCHEMA)
    assert again == copied
    assert _fingerprint(copied) == before


def test_gold_queries_match_sqlite(spider_root: Path, source: Path, pg: Database) -> None:
    examples = [
        e
        for e in json.loads((spider_root / "dev.json").read_text())
        if e["db_id"] == "concert_singer"
    ]
    assert examples
    lite = Database.open(source)
    matched = 0
    for example in examples[:15]:
        gold = example["query"]
        want = lite.execute(gold)
        got = pg.execute(to_postgres_sql(gold))
        ordered = has_top_level_order_by(gold)
        assert results_match(got, want, ordered=ordered), f"{gold}\n{got.rows}\n{want.rows}"
        matched += 1
    lite.close()
    assert matched == min(15, len(examples))


def test_mixed_type_column_falls_back_to_text(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "Mixed_DB.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute('CREATE TABLE "Things" ("ID" INTEGER, "Price" NUMBER, "Note" TEXT, "W" REAL)')
        conn.executemany(
            'INSERT INTO "Things" VALUES (?, ?, ?, ?)',
            [(1, 10, "a", 1), (2, "n/a", None, 2.5), (3, 7.5, "c", None)],
        )
    kinds = {c.name: c.kind for c in plan_tables(path)[0].columns}
    assert kinds == {"id": "integer", "price": "text", "note": "text", "w": "real"}
    url = copy_sqlite_to_postgres(path, pg_url)
    assert "search_path%3Dmixed_db" in url
    with Database.open(url) as db:
        assert db.execute("SELECT id, price, w FROM things ORDER BY id").rows == (
            (1, "10", 1.0),
            (2, "n/a", 2.5),
            (3, "7.5", None),
        )


# --- adversarial --------------------------------------------------------------------------------

PG_ATTACKS = {
    "insert": "INSERT INTO singer (singer_id, name) VALUES (100, 'x')",
    "update": "UPDATE singer SET name = 'x'",
    "delete": "DELETE FROM singer",
    "merge": "MERGE INTO singer s USING stadium t ON s.singer_id = t.stadium_id "
    "WHEN MATCHED THEN DELETE",
    "truncate": "TRUNCATE singer",
    "create_table": "CREATE TABLE pwned (x int)",
    "create_temp_table": "CREATE TEMP TABLE pwned AS SELECT 1",
    "drop_table": "DROP TABLE singer",
    "alter_table": "ALTER TABLE singer ADD COLUMN pwned int",
    "data_modifying_cte": "WITH d AS (DELETE FROM singer RETURNING *) SELECT * FROM d",
    "data_modifying_cte_insert": (
        "WITH i AS (INSERT INTO singer (singer_id) VALUES (101) RETURNING *) SELECT count(*) FROM i"
    ),
    "select_into": "SELECT * INTO pwned FROM singer",
    "copy_to_program": f"COPY singer TO PROGRAM 'touch {PWNED}'",
    "copy_to_file": f"COPY (SELECT 1) TO '{PWNED}.csv'",
    "set_config": "SELECT set_config('transaction_read_only', 'off', false)",
    "set_config_timeout": "SELECT set_config('statement_timeout', '0', false)",
    "set": "SET statement_timeout = 0",
    "set_transaction": "SET TRANSACTION READ WRITE",
    "select_for_update": "SELECT * FROM singer FOR UPDATE",
    "select_for_share": "SELECT * FROM singer FOR SHARE",
    "nextval": "SELECT nextval('pwned_seq')",
    "create_sequence": "CREATE SEQUENCE pwned_seq",
    "pg_read_file": "SELECT pg_read_file('/etc/passwd')",
    "lo_import": "SELECT lo_import('/etc/passwd')",
    "advisory_lock": "SELECT pg_advisory_lock(42)",
    "try_advisory_lock": "SELECT pg_try_advisory_lock(43)",
    "terminate_backend": "SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
    "commit_then_write": "SELECT 1; COMMIT; CREATE TABLE pwned (x int)",
    "rollback_then_write": "SELECT 1; ROLLBACK; DROP TABLE singer",
    "commit": "COMMIT",
    "do_block": "DO $$ BEGIN DELETE FROM singer; END $$",
    "prepare": "PREPARE pwned AS DELETE FROM singer",
    "lock_table": "LOCK TABLE singer IN ACCESS EXCLUSIVE MODE",
    "vacuum": "VACUUM singer",
    "grant": "GRANT ALL ON singer TO PUBLIC",
    "create_function": "CREATE FUNCTION pwned() RETURNS int AS 'SELECT 1' LANGUAGE sql",
    "comment_trick": "SELECT 1 /* ; */ ; DELETE FROM singer",
}


@pytest.fixture(scope="module")
def attack_urls(copied: str) -> dict[str, str]:
    urls = {"owner": copied}
    ro = os.environ.get("SQLWEAVE_PG_RO_URL")
    if ro:
        urls["read_only_role"] = search_path_url(ro, SCHEMA)
    return urls


def _run_attacks(url: str) -> dict[str, ExecutionError | object]:
    outcomes: dict[str, ExecutionError | object] = {}
    with Database.open(url) as db:
        for name, sql in PG_ATTACKS.items():
            outcomes[name] = db.try_execute(sql, timeout_s=TIMEOUT_S)
        assert db.execute("SELECT count(*) FROM singer", use_cache=False).rows == ((6,),)
    return outcomes


def test_suite_is_large_enough() -> None:
    assert len(PG_ATTACKS) >= 30


def test_attacks_are_refused(copied: str, attack_urls: dict[str, str]) -> None:
    before = _fingerprint(copied)
    for role, url in attack_urls.items():
        for name, outcome in _run_attacks(url).items():
            assert isinstance(outcome, ExecutionError), f"{role}: {name} ran"
            assert outcome.kind == "not_read_only", f"{role}: {name}: {outcome}"
    assert _fingerprint(copied) == before
    assert not PWNED.exists()


def test_engine_guard_alone_refuses(
    copied: str, attack_urls: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the sqlglot layer, the READ ONLY transaction (+ one-statement cursor) holds."""
    monkeypatch.setattr(dbmod.policy, "check_read_only", lambda sql, dialect="sqlite": None)
    before = _fingerprint(copied)
    for role, url in attack_urls.items():
        for name, outcome in _run_attacks(url).items():
            if name in ("set_config_timeout", "advisory_lock", "try_advisory_lock"):
                # Reads that change session state: allowed by PostgreSQL, undone after the query
                # (rollback; pg_advisory_unlock_all), which the fingerprint checks.
                continue
            if name == "terminate_backend" and not isinstance(outcome, ExecutionError):
                continue  # only signals our own role's sessions; checked below
            assert isinstance(outcome, ExecutionError), f"{role}: {name} ran: {outcome}"
    after = _fingerprint(copied)
    assert after == before, (before, after)
    assert not PWNED.exists()


def test_statement_timeout_stops_pg_sleep(pg: Database) -> None:
    start = time.perf_counter()
    err = pg.try_execute("SELECT pg_sleep(10)", timeout_s=TIMEOUT_S)
    elapsed = time.perf_counter() - start
    assert isinstance(err, ExecutionError) and err.kind == "timeout"
    assert err.feedback() == "Timed out: query did not finish within 1 s"
    assert elapsed <= TIMEOUT_S + 0.5
    start = time.perf_counter()
    err = pg.try_execute(
        "SELECT count(*) FROM generate_series(1, 100000000) a, generate_series(1, 100000000) b",
        timeout_s=TIMEOUT_S,
    )
    assert isinstance(err, ExecutionError) and err.kind == "timeout"
    # The cross join would run for hours; what matters is that it stops near the timeout. Its
    # cancellation once took 1.63 s during a full test run (0.5 s of slack failed), so the bound
    # leaves 2 s: still far below the query's own running time.
    assert time.perf_counter() - start <= TIMEOUT_S + 2.0
    assert pg.execute("SELECT 1", use_cache=False).rows == ((1,),)


def test_max_rows_does_not_fetch_everything(pg: Database) -> None:
    # A server-side cursor fetches only max_rows + 1 rows of a huge result.
    # (A nested-loop cross join streams; generate_series in FROM would be materialised first.)
    sql = "SELECT 1 FROM " + ", ".join(f"singer s{i}" for i in range(10))  # 6**10 = 60M rows
    start = time.perf_counter()
    result = pg.execute(sql, max_rows=5, timeout_s=30)
    assert result.rows == ((1,),) * 5 and result.truncated
    assert time.perf_counter() - start < 2.0


def test_errors_have_kinds(pg: Database) -> None:
    cases = {
        "SELECT nope FROM singer": "unknown_column",
        "SELECT * FROM nowhere": "unknown_table",
        "SELECT name FROM singer WHERE": "syntax",
        "SELECT 1 / 0": "runtime",
    }
    for sql, kind in cases.items():
        err = pg.try_execute(sql)
        assert isinstance(err, ExecutionError) and err.kind == kind, (sql, err)
    assert pg.execute("SELECT name FROM singer WHERE name LIKE '%a%' ORDER BY 1").rows


def test_unreachable_server_is_a_connection_error() -> None:
    with pytest.raises(ExecutionError) as info:
        Database.open("postgresql://nobody:x@127.0.0.1:1/none")
    assert info.value.kind == "connection"


def test_join_completion_on_a_copy_without_declared_keys(pg: Database) -> None:
    """The copy declares no keys; join completion falls back on the ones its names imply."""
    from sqlweave.programs.stages.joins import complete_joins, keys_of
    from sqlweave.schema import introspect

    schema = introspect(pg)
    assert not schema.foreign_keys and keys_of(schema)
    stray = "SELECT count(*) FROM singer WHERE concert_name = 'Super bootcamp'"
    assert isinstance(pg.try_execute(stray), ExecutionError)
    fixed = complete_joins(stray, schema, pg.dialect)
    assert fixed is not None and pg.execute(fixed).rows == ((2,),)


def test_grounded_vote_on_postgres(pg: Database) -> None:
    """The grounded selector's lookups on PostgreSQL: a guessed country drops out of the vote,
    a case-only difference and a number compared as text stay in."""
    from sqlweave.programs.stages.grounding import GroundedSelector, ValueLookup, is_grounded

    lookup = ValueLookup(pg)
    assert not is_grounded("SELECT count(*) FROM singer WHERE country = 'Holland'", lookup)
    assert is_grounded("SELECT count(*) FROM singer WHERE country = 'netherlands'", lookup)
    assert is_grounded("SELECT count(*) FROM singer AS s WHERE s.Country = 'Netherlands'", lookup)
    assert is_grounded("SELECT name FROM singer WHERE age = '52'", lookup)  # integer column
    holland = "SELECT count(*) FROM singer WHERE country = 'Holland'"
    netherlands = "SELECT count(*) FROM singer WHERE country = 'Netherlands'"
    out = GroundedSelector()(candidates=[holland, holland, netherlands], db=pg)
    assert out.sql == netherlands and out.kept == [2]


def test_arrays_json_and_ranges_come_back_as_their_text(pg: Database) -> None:
    """psycopg would build Python objects of these inside the fetch, where no deadline is
    looked at (range_agg over 3 M ranges: 40.7 s at a 2 s timeout); the untrusted query reads
    them as PostgreSQL's text, and introspection still works on the same pooled connections."""
    sql = (
        "SELECT ARRAY[1, 2], '{\"a\": 1}'::jsonb, int4range(1, 5), "
        "range_agg(int4range(g, g + 1)) FROM generate_series(1, 7, 2) AS g"
    )
    (row,) = pg.execute(sql).rows
    assert row == ("{1,2}", '{"a": 1}', "[1,5)", "{[1,2),[3,4),[5,6),[7,8)}")
    from sqlweave.schema import introspect

    assert introspect(pg).tables
