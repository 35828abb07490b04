"""Properties that must hold for every input, checked on inputs hypothesis makes up, beside the
hand-picked cases of ``test_attacks.py``, ``test_serve.py`` and ``test_metrics*.py``:

* **read-only, whatever the text**: a statement that writes, disguised by case, comments,
  white space, a leading CTE or ``EXPLAIN``, or chained after a harmless one, leaves the
  SQLite (and DuckDB) file byte for byte as it was, creates no file beside it, and comes back
  as a result or an :class:`~sqlweave.db.ExecutionError`, never another exception;
* **the API never fails on its input**: any body posted to ``/ask`` (any JSON, any bytes) gets
  a JSON answer, 200 or a 4xx that names the problem, never a 500;
* **a query survives its wrapping**: the SQL a model writes comes back from
  :func:`~sqlweave.sqltext.extract_sql` as written, whatever prose, fence, ``SQL:`` or ``;``
  surrounds it, even with a ``;`` inside a value or "select" in the prose before it;
* **a malformed questions file is a** :class:`~sqlweave.data.DataError` naming the file, never
  another exception, whatever its items hold;
* **the reported p is the exact binomial test** (scipy's), symmetric; a bootstrap interval holds its
  mean;
* **EX is the official verdict**: the text the official Spider scoring runs (``sqlparse``'s
  first statement without DISTINCT) is what :func:`~sqlweave.metrics.remove_distinct` gives,
  and :func:`sqlweave.metrics.results_match` with the Spider semantics gives the official
  test-suite ``result_eq``'s verdict (:mod:`sqlweave.official`) on any pair of small results,
  including values that are equal but print differently.

Every run draws the same examples (``derandomize``): a property test in CI must not be flaky.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import string
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_CONCERT_DB
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_attacks import pg_roles  # noqa: F401 - the fixture: the copied database's role URLs

from sqlweave import official
from sqlweave.db import Database, ExecutionError, QueryResult
from sqlweave.metrics import results_match
from sqlweave.sqltext import extract_sql

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# --- read-only, whatever the text -----------------------------------------------------------------

#: Statements that would change the database or the disk (``{dir}``: the database's folder).
WRITES = (
    "INSERT INTO singer (Singer_ID, Name) VALUES (99, 'x')",
    "INSERT INTO singer (Singer_ID) VALUES (1) ON CONFLICT DO NOTHING",
    "REPLACE INTO singer (Singer_ID, Name) VALUES (1, 'x')",
    "UPDATE singer SET Name = 'x'",
    "UPDATE singer SET Age = Age + 1 RETURNING Age",
    "DELETE FROM singer",
    "DELETE FROM singer RETURNING *",
    "DROP TABLE singer",
    "DROP VIEW IF EXISTS v",
    "CREATE TABLE t (x INTEGER)",
    "CREATE TEMP TABLE t AS SELECT * FROM singer",
    "CREATE VIEW v AS SELECT 1",
    "CREATE INDEX i ON singer (Name)",
    "CREATE TRIGGER g AFTER INSERT ON singer BEGIN DELETE FROM singer; END",
    "ALTER TABLE singer ADD COLUMN x INTEGER",
    "ALTER TABLE singer RENAME TO s",
    "ATTACH DATABASE '{dir}/pwned.db' AS p",
    "VACUUM INTO '{dir}/copy.db'",
    "VACUUM",
    "REINDEX",
    "ANALYZE",
    "PRAGMA user_version = 7",
    "PRAGMA journal_mode = WAL",
    "PRAGMA writable_schema = ON",
    "BEGIN; DELETE FROM singer; COMMIT",
    "SAVEPOINT a; DELETE FROM singer; RELEASE a",
    "SELECT writefile('{dir}/pwned.txt', 'x')",
    "SELECT load_extension('{dir}/pwned')",
    "COPY singer TO '{dir}/out.csv'",
    "EXPORT DATABASE '{dir}/exported'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "CHECKPOINT",
    "SET memory_limit = '1GB'",
    "CREATE SEQUENCE q",
    "CREATE MACRO m(x) AS x + 1",
)
#: What may stand between two words of a statement.
GAPS = (" ", "  ", "\t", "\n", "/**/", " /* note */ ", "\n-- note\n", "\r\n")
#: What may come before it and after it.
PREFIXES = ("", " ", ";", "; ", "SELECT 1; ", "WITH a AS (SELECT 1) ", "EXPLAIN ", "/* a */ ")
SUFFIXES = ("", ";", " ;", "; SELECT 1", " -- tail", ";;")


@st.composite
def disguised(draw: st.DrawFn, statements: Sequence[str]) -> str:
    """One of ``statements``, its words joined by random gaps, in random case."""
    words = draw(st.sampled_from(statements)).split(" ")
    text = words[0]
    for word in words[1:]:
        text += draw(st.sampled_from(GAPS)) + word
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    text = "".join(c.swapcase() if flip else c for c, flip in zip(text, flips, strict=True))
    return draw(st.sampled_from(PREFIXES)) + text + draw(st.sampled_from(SUFFIXES))


def _writes(folder: Path) -> list[str]:
    return [w.format(dir=folder) for w in WRITES]


def _listing(folder: Path) -> dict[str, str]:
    """Every entry below ``folder``: a file's sha256, a folder's mark."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file()
        else "/"
        for p in sorted(folder.rglob("*"))
    }


def _writable_copy(folder: Path) -> Path:
    folder.mkdir()
    target = folder / "concert_singer.sqlite"
    shutil.copyfile(DEMO_CONCERT_DB, target)
    target.chmod(0o644)  # writable on disk: only sqlweave's guards stand in the way
    return target


def _check_unchanged(db: Database, folder: Path, before: dict[str, str], sql: str) -> None:
    outcome = db.try_execute(sql, timeout_s=2.0, use_cache=False)
    assert isinstance(outcome, QueryResult | ExecutionError)
    assert _listing(folder) == before, f"a file changed or appeared after {sql!r}"
    count = db.execute("SELECT count(*) FROM singer", use_cache=False).rows
    assert count == ((6,),), sql


def test_no_disguised_write_changes_a_sqlite_file(tmp_path: Path) -> None:
    folder = tmp_path / "sqlite"
    path = _writable_copy(folder)
    before = _listing(folder)
    with Database.open(path) as db:
        for sql in _writes(folder):  # each as written, then disguised
            _check_unchanged(db, folder, before, sql)

        @SETTINGS
        @given(disguised(_writes(folder)))
        def check(sql: str) -> None:
            _check_unchanged(db, folder, before, sql)

        check()


def test_no_disguised_write_changes_a_duckdb_file(tmp_path: Path) -> None:
    pytest.importorskip("duckdb_engine")
    from sqlweave.transfer import copy_sqlite_to_duckdb

    sqlite = _writable_copy(tmp_path / "sqlite")
    folder = tmp_path / "duck"
    path = copy_sqlite_to_duckdb(sqlite, folder / "concert_singer.duckdb")
    before = _listing(folder)
    with Database.open(f"duckdb:///{path}") as db:
        for sql in _writes(folder):
            _check_unchanged(db, folder, before, sql)

        @settings(SETTINGS, max_examples=150)
        @given(disguised(_writes(folder)))
        def check(sql: str) -> None:
            _check_unchanged(db, folder, before, sql)

        check()


#: PostgreSQL's own ways to write, besides :data:`WRITES`'s that it shares.
PG_WRITES = (
    "INSERT INTO singer (Singer_ID) VALUES (99)",
    "UPDATE singer SET Name = 'x'",
    "DELETE FROM singer",
    "TRUNCATE singer",
    "DROP TABLE singer CASCADE",
    "CREATE TABLE t AS SELECT * FROM singer",
    "CREATE UNLOGGED TABLE t (x int)",
    "ALTER TABLE singer ADD COLUMN x int",
    f"COPY singer TO '{Path(tempfile.gettempdir()) / 'sqlweave_property_pwned.csv'}'",
    f"COPY singer FROM '{Path(tempfile.gettempdir()) / 'sqlweave_property_in.csv'}'",
    "DO $$ BEGIN DELETE FROM singer; END $$",
    "GRANT ALL ON singer TO PUBLIC",
    "COMMENT ON TABLE singer IS 'x'",
    "VACUUM FULL singer",
    "ANALYZE singer",
    "CLUSTER singer",
    "REINDEX TABLE singer",
    "LOCK TABLE singer IN ACCESS EXCLUSIVE MODE",
    "SET search_path = pg_catalog",
    "RESET ALL",
    "NOTIFY channel, 'x'",
    "PREPARE p AS DELETE FROM singer",
    "SELECT set_config('search_path', 'pg_catalog', false)",
    "SELECT pg_advisory_lock(7)",
    "SELECT lo_create(0)",
    "SELECT pg_stat_reset()",
    "SELECT nextval('s')",
    "WITH d AS (DELETE FROM singer RETURNING *) SELECT * FROM d",
    "SELECT * FROM singer FOR UPDATE",
    "BEGIN; DELETE FROM singer; COMMIT",
    "CREATE FUNCTION f() RETURNS int AS 'SELECT 1' LANGUAGE sql",
)


@pytest.mark.postgres
def test_no_disguised_write_changes_postgres(pg_roles: dict[str, str]) -> None:  # noqa: F811
    """As the schema's owner (who may write, but for sqlweave's guards), each write as written
    and disguised leaves the catalog, the tables, locks, settings and statistics as they were
    (``test_attacks.py``'s snapshot) and writes no file."""
    from test_attacks import _engine, _env, _pg_state

    watcher = _engine(_env("SQLWEAVE_PG_SUPER_URL"))
    try:
        with watcher.connect() as conn:
            before = _pg_state(conn)
        with Database.open(pg_roles["owner"]) as db:

            def run(sql: str) -> None:
                outcome = db.try_execute(sql, timeout_s=2.0, use_cache=False)
                assert isinstance(outcome, QueryResult | ExecutionError)
                count = db.execute("SELECT count(*) FROM singer", use_cache=False).rows
                assert count == ((6,),), sql

            for sql in PG_WRITES:
                run(sql)

            @settings(SETTINGS, max_examples=150)
            @given(disguised(PG_WRITES))
            def check(sql: str) -> None:
                run(sql)

            check()
        with watcher.connect() as conn:
            after = _pg_state(conn)
        assert {k: (v, after.get(k)) for k, v in before.items() if after.get(k) != v} == {}
    finally:
        watcher.dispose()
    temp = Path(tempfile.gettempdir())
    pwned = [p for p in temp.iterdir() if p.name.lower().startswith("sqlweave_property")]
    assert not pwned, pwned


# --- a capped result says it is capped ---------------------------------------------------------


@pytest.mark.parametrize("engine", ["sqlite", "duckdb"])
def test_a_capped_result_holds_the_first_rows_and_says_so(tmp_path: Path, engine: str) -> None:
    """Any row cap: the rows are the query's first ``max_rows`` (in its order) and
    ``truncated`` is true exactly when there were more."""
    path = _writable_copy(tmp_path / "db")
    if engine == "duckdb":
        pytest.importorskip("duckdb_engine")
        from sqlweave.transfer import copy_sqlite_to_duckdb

        url = f"duckdb:///{copy_sqlite_to_duckdb(path, tmp_path / 'duck' / 'c.duckdb')}"
    else:
        url = str(path)
    with Database.open(url) as db:
        full = {
            sql: db.execute(sql, max_rows=None, use_cache=False).rows
            for sql in (
                "SELECT Name FROM singer ORDER BY Age, Name",
                "SELECT Name, Country FROM singer WHERE Age > 30 ORDER BY Name",
                "SELECT Country, count(*) FROM singer GROUP BY Country ORDER BY Country",
                "SELECT Name FROM singer WHERE Age < 0",
            )
        }

        @settings(SETTINGS, max_examples=60)
        @given(st.sampled_from(sorted(full)), st.integers(0, 9))
        def check(sql: str, cap: int) -> None:
            result = db.execute(sql, max_rows=cap, use_cache=False)
            assert result.rows == full[sql][:cap]
            assert result.truncated == (len(full[sql]) > cap)

        check()


# --- the API never fails on its input ------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner)
    ),
    max_leaves=12,
)
#: A request the API answers; :func:`spoiled` spoils some of it.
VALID = {"question": "How many singers are there?", "db": "concert_singer", "evidence": ""}


@st.composite
def spoiled(draw: st.DrawFn) -> dict[str, Any]:
    """:data:`VALID` with some fields dropped or holding anything, and perhaps one more field:
    mostly one change at a time, so that each check of the API is reached on its own."""
    body: dict[str, Any] = dict(VALID)
    for name in draw(st.sets(st.sampled_from([*VALID, "extra"]), max_size=2)):
        if name == "extra":
            body[draw(st.sampled_from(["sql", "Question", "", "db_id"]))] = draw(JSON)
        elif draw(st.booleans()):
            del body[name]
        else:
            body[name] = draw(JSON | st.sampled_from(["", " ", "../etc/passwd", "x" * 30000]))
    return body


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The API over a writable copy of the bundled database, a DummyLM answering one count; the
    folder is checked unchanged once every body has been posted."""
    pytest.importorskip("starlette", reason="the serve extra")
    pytest.importorskip("httpx", reason="starlette's TestClient")
    from dspy.utils import DummyLM
    from starlette.testclient import TestClient

    from sqlweave.serve import create_app

    path = _writable_copy(tmp_path_factory.mktemp("serve") / "db")
    before = _listing(path.parent)
    lm = DummyLM({"": {"sql": "SELECT count(*) FROM singer"}})
    app = create_app("direct", {"concert_singer": path}, lm=lm)
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        yield client
    assert _listing(path.parent) == before


def _post(client: Any, body: str | bytes) -> None:
    response = client.post("/ask", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code in (200, 400, 404, 413, 422), (body, response.text)
    answer = response.json()
    if response.status_code == 200:
        assert answer["rows"] == [[6]] and answer["sql"], body
    else:
        assert isinstance(answer["error"], str) and answer["error"], body


def test_a_spoiled_request_gets_a_json_answer_and_never_a_500(served: Any) -> None:
    @settings(SETTINGS, max_examples=400)
    @given(spoiled().map(json.dumps))
    def check(body: str) -> None:
        _post(served, body)

    check()


def test_any_body_gets_a_json_answer_and_never_a_500(served: Any) -> None:
    @settings(SETTINGS, max_examples=150)
    @given(st.one_of(JSON.map(json.dumps), st.binary(max_size=64)))
    def check(body: str | bytes) -> None:
        _post(served, body)

    check()


# --- a query survives its wrapping -----------------------------------------------------------

#: Characters a value in a query may hold (no quote, backquote or line break).
VALUE_CHARS = st.sampled_from(list(string.ascii_letters + string.digits + ' ;,.-_()*%#/"[]'))


@st.composite
def queries(draw: st.DrawFn) -> str:
    query = f"SELECT {draw(st.sampled_from(['name', 'T1.age', 'count(*)', '*']))} FROM "
    query += draw(st.sampled_from(["singer", "concert AS T1", "[my table]"]))
    if draw(st.booleans()):
        query += f" WHERE name = '{draw(st.text(VALUE_CHARS, max_size=12))}'"
    if draw(st.booleans()):
        query += " ORDER BY age DESC"
    if draw(st.booleans()):
        query = f"WITH a AS ({query}) SELECT * FROM a"
    return query


#: How models wrap their query: before it, and after it (unfenced).
INTROS = (
    "",
    "SQL: ",
    "Here is the SQL query:\n",
    "Sure! Here's the query you asked for.\n\n",
    "To select the singers, run:\n",
    "Answer with this query:\n",
)
OUTROS = (
    "",
    ";",
    ";\n",
    " ;",
    "\n\nThis query returns the rows.",
    "; -- done",
    ";\nNote: it reads",
)


@SETTINGS
@given(queries(), st.sampled_from(INTROS), st.sampled_from(OUTROS), st.booleans())
def test_a_query_comes_back_as_written(query: str, intro: str, outro: str, fenced: bool) -> None:
    if fenced:
        text = f"{intro}```sql\n{query}{';' if outro.startswith(';') else ''}\n```\nThat is it."
    else:
        text = intro + query + outro
    assert extract_sql(text) == query, text


@settings(SETTINGS, max_examples=500)
@given(st.text(max_size=400))
def test_any_text_gives_one_statement_or_nothing(text: str) -> None:
    sql = extract_sql(text)
    assert isinstance(sql, str) and sql == sql.strip()
    assert sql == "" or re.match(r"(?i)(with|select)\b", sql), sql


# --- a malformed questions file is a DataError -------------------------------------------------

#: Question objects whose fields hold anything, a real database or question among them.
ITEMS = st.fixed_dictionaries(
    {},
    optional={
        "question": JSON | st.just("How many singers are there?"),
        "db_path": JSON | st.sampled_from([str(DEMO_CONCERT_DB), "x" * 300 + ".sqlite", "a\x00b"]),
        "db": JSON,
        "db_id": JSON | st.sampled_from(["concert_singer", "no_such_db", "../x", "y" * 300]),
        "sql": JSON | st.just("SELECT count(*) FROM singer"),
        "evidence": JSON,
        "question_id": JSON,
        "difficulty": JSON,
    },
)


@settings(SETTINGS, max_examples=400)
@given(
    st.one_of(
        st.lists(ITEMS | JSON, max_size=3).map(json.dumps),
        st.lists(ITEMS | JSON, max_size=3).map(lambda xs: "\n".join(json.dumps(x) for x in xs)),
        JSON.map(json.dumps),
        st.binary(max_size=80).map(lambda b: b.decode("latin-1")),
    ),
    st.sampled_from(["questions.json", "questions.jsonl"]),
)
def test_a_malformed_questions_file_is_a_data_error(
    tmp_path_factory: pytest.TempPathFactory, text: str, name: str
) -> None:
    from sqlweave.data import DataError, load_questions

    path = tmp_path_factory.mktemp("questions") / name
    path.write_text(text, encoding="utf-8")
    try:
        examples = load_questions(path)
    except DataError as err:
        assert str(path.name) in str(err), err
        return
    for example in examples:
        assert isinstance(example.question, str) and example.question.strip()
        assert Path(example.db_path).is_file()


@settings(SETTINGS, max_examples=300)
@given(st.lists(ITEMS | JSON, max_size=3))
def test_malformed_examples_from_python_are_a_data_error(items: list[Any]) -> None:
    """``sqlweave.compile``'s and ``evaluate``'s lists: the same, through ``as_examples``."""
    from sqlweave.data import DataError
    from sqlweave.examples import as_examples

    try:
        examples = as_examples(items, need_sql=False)
    except DataError as err:
        assert "cannot be used" in str(err), err
        return
    for example in examples:
        assert isinstance(example.question, str) and example.question.strip()
        assert Path(example.db_path).is_file()


# --- EX is the official verdict ------------------------------------------------------------------


#: Values that meet in real results: equal ones that print differently (1, 1.0, True; 0.0,
#: -0.0), text that looks like a number, NULL.
VALUES = st.sampled_from([0, 1, 2, 1.0, 0.0, -0.0, 2.5, True, "1", "a", "b", "", None])
#: An equal value of another type (or sign), by the value's repr.
EQUAL = {"0": 0.0, "1": 1.0, "2": 2.0, "1.0": True, "0.0": -0.0, "-0.0": 0, "True": 1}


@st.composite
def result_pairs(draw: st.DrawFn) -> tuple[list[tuple], list[tuple], bool]:
    """(gold, pred, ordered): pred often gold with its columns and rows shuffled and perhaps one
    value changed, its values retyped (1 as 1.0), a row dropped or doubled, so that both
    verdicts come up."""
    ncols = draw(st.integers(1, 3))
    row = st.tuples(*[VALUES] * ncols)
    gold = draw(st.lists(row, max_size=5))
    ordered = draw(st.booleans())
    if draw(st.booleans()):
        width = draw(st.integers(1, 3))
        return gold, draw(st.lists(st.tuples(*[VALUES] * width), max_size=5)), ordered
    perm = draw(st.permutations(range(ncols)))
    pred = [tuple(r[j] for j in perm) for r in gold]
    if not ordered or draw(st.booleans()):
        pred = draw(st.permutations(pred))
    change = draw(st.sampled_from(["none", "value", "retype", "drop", "duplicate"]))
    if pred and change == "retype":  # every value as an equal one of another type, if any
        pred = [tuple(EQUAL.get(repr(v), v) for v in r) for r in pred]
    elif pred and change == "value":
        i, j = draw(st.integers(0, len(pred) - 1)), draw(st.integers(0, ncols - 1))
        values = list(pred[i])
        values[j] = draw(VALUES)
        pred[i] = tuple(values)
    elif pred and change == "drop":
        pred = pred[1:]
    elif pred and change == "duplicate":
        pred = [*pred[1:], pred[-1]]
    return gold, list(pred), ordered


@SETTINGS
@given(result_pairs())
def test_spider_ex_is_the_official_result_eq(pair: tuple[list[tuple], list[tuple], bool]) -> None:
    gold, pred, ordered = pair
    expected = official.result_eq(gold, pred, ordered, random.Random(0))
    assert results_match(pred, gold, "spider", ordered) == expected, (gold, pred, ordered)


#: Pieces of SQL text where the official preparation (``sqlparse``) is easy to get wrong: a
#: ``;`` or DISTINCT inside strings, names and comments, CASE ... END levels, GO, placeholders.
PIECES = st.sampled_from(
    [
        "SELECT", "DISTINCT", "distinct", "Distinct", "name", "T1.name", "count(", "(", ")",
        "FROM", "singer", "WHERE", "=", ">", "'a;b'", "'it''s'", '"distinct"', "`x;y`", "[a b]",
        ";", "; ", "-- c;\n", "# c\n", "/* ; */", "CASE", "WHEN", "THEN", "END", "GO", "GO 2",
        "$1", ":v", "?", "1", "-2.5", "0x1F", "AS", "IN", "\n", " ", "\t", "SELECT DISTINCT",
        "END IF", "x.y", "'", '"',
    ]
)  # fmt: skip


@settings(SETTINGS, max_examples=1000)
@given(st.lists(PIECES, max_size=14).map(" ".join))
def test_remove_distinct_is_sqlparses(sql: str) -> None:
    """The official Spider scoring drops DISTINCT tokens from ``sqlparse.parse(sql)[0]``;
    :func:`~sqlweave.metrics.remove_distinct` does it with one regex lexer instead."""
    sqlparse = pytest.importorskip("sqlparse")
    from sqlweave.metrics import remove_distinct

    assume(sqlparse.parse(sql))  # no statement at all: the official script fails
    assert remove_distinct(sql) == official.remove_distinct(sql), sql


def test_the_official_reference_can_tell_both_ways() -> None:
    """The reference is not vacuous: it matches a column swap and refuses a changed row."""
    gold, rng = [(1, "a"), (2, "b")], random.Random(0)
    assert official.result_eq(gold, [("b", 2), ("a", 1)], False, rng)
    assert not official.result_eq(gold, [("b", 2), ("a", 2)], False, rng)
    assert not official.result_eq(gold, [("b", 2), ("a", 1)], True, rng)


#: Pieces of queries over ``singer`` where the official preparation and comparison are easy to
#: get wrong: DISTINCT, spaced operators, ORDER BY written in a string or a comment, NULLs, a
#: second statement, duplicates, column order.
COLUMNS = st.sampled_from(
    ["Name", "Country", "Age", "Is_male", "Song_release_year", "Name, Age", "Age, Name",
     "Country, Is_male", "count(*)", "avg(Age)", "max(Age), Country", "NULL", "Age * 1.0"]
)  # fmt: skip
CONDITIONS = st.sampled_from(
    ["", " WHERE Age > 30", " WHERE Age > = 30", " WHERE Age ! = 52", " WHERE Country = 'France'",
     " WHERE Name = 'order by'", " WHERE Age < 0", " /* order by */ WHERE Age < 45",
     " WHERE Song_release_year IS NULL"]
)  # fmt: skip
ENDINGS = st.sampled_from(
    ["", " ORDER BY Age", " ORDER BY Age DESC", " ORDER  BY Name", " GROUP BY Country",
     " GROUP BY Country ORDER BY count(*) DESC", " LIMIT 3", " ORDER BY Age LIMIT 2", "; SELECT 1",
     " -- order by Age"]
)  # fmt: skip


@st.composite
def singer_queries(
    draw: st.DrawFn, columns: str | None = None, condition: str | None = None
) -> str:
    distinct = draw(st.sampled_from(["", "DISTINCT ", "distinct "]))
    columns = draw(COLUMNS) if columns is None else columns
    condition = draw(CONDITIONS) if condition is None else condition
    return f"SELECT {distinct}{columns} FROM singer{condition}{draw(ENDINGS)}"


@st.composite
def query_pairs(draw: st.DrawFn) -> tuple[str, str]:
    """(pred, gold): half the time two queries of their own, else the same columns and
    condition with their own DISTINCT and ending, where ordering and duplicates decide."""
    if draw(st.booleans()):
        return draw(singer_queries()), draw(singer_queries())
    columns, condition = draw(COLUMNS), draw(CONDITIONS)
    return draw(singer_queries(columns, condition)), draw(singer_queries(columns, condition))


@settings(SETTINGS, max_examples=600)
@given(query_pairs())
def test_spider_ex_is_the_official_procedure_end_to_end(pair: tuple[str, str]) -> None:
    """:func:`~sqlweave.metrics.check_execution` with the Spider semantics against the official
    procedure run literally (:mod:`sqlweave.official`: the operator repair, sqlparse's first
    statement without DISTINCT, "order by" looked for in the gold's text, a fresh sqlite3
    connection, ``result_eq``), on pairs of made-up queries over one database."""
    pytest.importorskip("sqlparse")
    from sqlweave.metrics import check_execution

    pred, gold = pair
    verdict, gold_failed = official.spider_verdict(
        pred, gold, str(DEMO_CONCERT_DB), random.Random(0)
    )
    assume(not gold_failed)  # a gold that fails is refused before scoring (GoldQueryError)
    with Database.open(DEMO_CONCERT_DB) as db:
        ours = check_execution(pred, gold, db, "spider").correct
    assert ours == verdict, (pred, gold)


@settings(SETTINGS, max_examples=300)
@given(query_pairs())
def test_bird_ex_is_the_official_procedure_end_to_end(pair: tuple[str, str]) -> None:
    """The same for BIRD's ``evaluation.py``: both run on one connection, ``set(pred) ==
    set(gold)``, any exception a miss."""
    from sqlweave.metrics import check_execution

    pred, gold = pair
    verdict, gold_failed = official.bird_verdict(pred, gold, str(DEMO_CONCERT_DB))
    assume(not gold_failed)
    with Database.open(DEMO_CONCERT_DB) as db:
        ours = check_execution(pred, gold, db, "bird").correct
    assert ours == verdict, (pred, gold)


# --- the reported p and interval -----------------------------------------------------------------


@settings(SETTINGS, max_examples=400)
@given(st.integers(0, 300), st.integers(0, 300))
def test_mcnemar_is_scipys_exact_binomial_test(b: int, c: int) -> None:
    """Every paired p this project reports is :func:`~sqlweave.stats.mcnemar_exact`."""
    scipy_stats = pytest.importorskip("scipy.stats")
    from sqlweave.stats import mcnemar_exact

    expected = 1.0 if b + c == 0 else scipy_stats.binomtest(b, b + c, 0.5).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-9, abs=1e-300)
    assert mcnemar_exact(b, c) == mcnemar_exact(c, b)


@settings(SETTINGS, max_examples=200)
@given(st.lists(st.booleans(), max_size=60), st.sampled_from([0.8, 0.9, 0.95, 0.975]))
def test_a_bootstrap_interval_holds_its_mean(outcomes: list[bool], level: float) -> None:
    from sqlweave.stats import bootstrap_ci

    ci = bootstrap_ci(outcomes, level=level, resamples=300)
    assert 0.0 <= ci.low <= ci.estimate <= ci.high <= 1.0 and ci.n == len(outcomes)
