"""Comments in a prediction, and predictions or gold queries that hold no statement (issue 35).

Each prediction is scored under all four semantics and, for the official two, compared with the
official procedure run literally here: BIRD's ``cursor.execute(sql)`` and a set comparison, and
Spider's ``sqlparse.parse(sql)[0]`` with DISTINCT tokens dropped, then ``cursor.execute``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import dspy
import pytest

from sqlweave.db import Database
from sqlweave.metrics import (
    SEMANTICS,
    GoldQueryError,
    check_execution,
    drop_open_comment,
    ex_metric,
    has_no_statement,
    sqlite_statement,
)

GOLD = "SELECT name FROM person WHERE age > 40"


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Database]:
    path = tmp_path_factory.mktemp("comments") / "people.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE person (id INTEGER PRIMARY KEY, name TEXT, age INTEGER);"
        "INSERT INTO person VALUES (1, 'Zed', 30), (2, 'Ana', 45), (3, 'Bo', 50), (4, 'Cy', 25);"
    )
    conn.commit()
    conn.close()
    db = Database.open(path)
    yield path, db
    db.close()


def _official_bird(path: Path, pred: str) -> bool:
    conn = sqlite3.connect(path)
    try:
        try:
            rows = conn.execute(pred).fetchall()
        except (sqlite3.Error, sqlite3.Warning):
            return False
        return set(rows) == set(conn.execute(GOLD).fetchall())
    finally:
        conn.close()


def _official_spider(path: Path, pred: str) -> bool:
    sqlparse = pytest.importorskip("sqlparse")
    tokens = [t.value for t in sqlparse.parse(pred)[0].flatten()]
    return _official_bird_multiset(path, "".join(t for t in tokens if t.lower() != "distinct"))


def _official_bird_multiset(path: Path, sql: str) -> bool:
    conn = sqlite3.connect(path)
    try:
        try:
            rows = conn.execute(sql).fetchall()
        except (sqlite3.Error, sqlite3.Warning):
            return False
        return sorted(rows) == sorted(conn.execute(GOLD).fetchall())
    finally:
        conn.close()


#: (prediction, verdict under official-spider, official-bird, strict-spider, strict-bird)
CASES = [
    # leading comments of both kinds (issue 35: a leading /* */ read as "no statement")
    ("/* find them */ SELECT name FROM person WHERE age > 40", True, True, True, True),
    ("/**/SELECT name FROM person WHERE age > 40", True, True, True, True),
    ("/* x */ /* y */ SELECT name FROM person WHERE age > 40", True, True, True, True),
    ("-- find them\nSELECT name FROM person WHERE age > 40", True, True, True, True),
    # trailing comments, before and after a final ;
    ("SELECT name FROM person WHERE age > 40 /* done */", True, True, True, True),
    ("SELECT name FROM person WHERE age > 40 -- done", True, True, True, True),
    ("SELECT name FROM person WHERE age > 40; -- done", True, True, True, True),
    ("SELECT name FROM person WHERE age > 40; /* done */", True, True, True, True),
    ("SELECT name FROM person WHERE age > 40 /* left open", True, True, True, True),
    # interleaved
    ("SELECT name /* the name */ FROM person -- all\nWHERE age > 40", True, True, True, True),
    ("SELECT name /* ; */ FROM person WHERE age > 40", True, True, True, True),
    ("SELECT DISTINCT name FROM person /* distinct */ WHERE age > 40", True, True, True, True),
    (
        "/* a */\n-- b\nSELECT name\n/* c */ FROM person /* d */ WHERE age /* e */ > 40 -- f",
        True,
        True,
        True,
        True,
    ),
    # a comment that hides part of the query, and a second statement behind a comment
    ("SELECT name FROM person /* WHERE age > 40 */", False, False, False, False),
    ("SELECT name FROM person -- WHERE age > 40", False, False, False, False),
    ("/* a */ SELECT name FROM person WHERE age > 40; /* b */ SELECT 1", True, False, False, False),
    # only comments: no statement, never rewarded (officially: an empty result, not this gold)
    ("/* only a comment */", False, False, False, False),
    ("/* left open SELECT name FROM person WHERE age > 40", False, False, False, False),
    ("-- SELECT name FROM person WHERE age > 40", False, False, False, False),
]


@pytest.mark.parametrize(("pred", "verdicts"), [(case[0], case[1:]) for case in CASES])
def test_comments_are_scored_as_the_official_scripts_score_them(
    people: tuple[Path, Database], pred: str, verdicts: tuple[bool, ...]
) -> None:
    path, db = people
    got = {sem: check_execution(pred, GOLD, db, sem).correct for sem in SEMANTICS}
    assert got == dict(zip(SEMANTICS, verdicts, strict=True))
    # The expected official verdicts are the official procedures' own.
    assert got["official-bird"] == _official_bird(path, pred)
    assert got["official-spider"] == _official_spider(path, pred)


def test_statement_finding_reads_comments_as_sqlite_does() -> None:
    assert not has_no_statement("/* c */ SELECT 1")
    assert not has_no_statement("/* c */ SELECT 1 /* d */")
    assert has_no_statement("/* a */ -- b\n/* c") and has_no_statement(" ;; /* x */")
    assert sqlite_statement("/* c */ SELECT 1") == "/* c */ SELECT 1"
    # a second statement after a closed comment is still a second statement
    assert sqlite_statement("SELECT 1; /* x */ SELECT 2") == "SELECT 1; /* x */ SELECT 2"
    assert drop_open_comment("SELECT 1 /* open") == "SELECT 1 "
    assert drop_open_comment("SELECT '/* not a comment'") == "SELECT '/* not a comment'"
    assert drop_open_comment("SELECT 1 -- /* in a line comment") == (
        "SELECT 1 -- /* in a line comment"
    )
    assert drop_open_comment("SELECT 1 /* closed */") == "SELECT 1 /* closed */"


# --- nothing to score ----------------------------------------------------------------------


@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("pred", ["", "   ", "-- nothing", "/* nothing */", ";"])
def test_an_empty_prediction_never_matches_an_empty_gold_result(
    people: tuple[Path, Database], semantics: str, pred: str
) -> None:
    _, db = people
    match = check_execution(pred, "SELECT name FROM person WHERE age > 99", db, semantics)
    assert match.correct is False and match.error is not None and match.error.kind == "syntax"


@pytest.mark.parametrize("gold", ["", "  ", "-- no gold", "/* none */"])
def test_an_empty_gold_is_an_error_or_a_flagged_miss(
    people: tuple[Path, Database], gold: str
) -> None:
    _, db = people
    with pytest.raises(GoldQueryError, match="gold query is empty"):
        check_execution("SELECT 1 WHERE 0", gold, db, strict_gold=True)
    match = check_execution("SELECT 1 WHERE 0", gold, db, strict_gold=False)
    assert match.correct is False and match.gold_error is not None


def test_ex_metric_never_rewards_an_empty_prediction(people: tuple[Path, Database]) -> None:
    path, _ = people
    example = dspy.Example(
        question="Anyone over 99?",
        db_id="people",
        db_path=str(path),
        gold_sql="SELECT name FROM person WHERE age > 99",
        source="bird",  # BIRD's official script would score the empty prediction as right
    ).with_inputs("question")
    for pred in (dspy.Prediction(sql=""), dspy.Prediction(sql="/* */"), None):
        assert ex_metric(example, pred) == 0.0
        assert ex_metric(example, pred, trace=[]) is False
    assert ex_metric(example, dspy.Prediction(sql="SELECT name FROM person WHERE age > 99")) == 1.0
    with pytest.raises(GoldQueryError):
        ex_metric(example.copy(gold_sql=""), dspy.Prediction(sql="SELECT 1 WHERE 0"))


def test_an_order_by_in_the_gold_s_open_comment_orders_it_officially(people) -> None:
    """The official script tests the gold text, comment and all, for "order by": a gold query
    ending in an unterminated ``/* order by`` comment is scored as ordered (it was unordered)."""
    _, db = people
    gold = "SELECT name FROM person WHERE age > 20 /* order by age"
    shuffled = "SELECT name FROM person WHERE age > 20 ORDER BY name"
    assert not check_execution(shuffled, gold, db, "official-spider").correct
    assert check_execution(
        shuffled, gold.replace("order by", "sorted"), db, "official-spider"
    ).correct
    assert check_execution(gold, gold, db, "official-spider").correct
