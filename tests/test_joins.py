"""Join completion (``programs/stages/joins.py``): a column of a table the query never joined gets the
joins along the shortest foreign-key path, on the bundled concert_singer database and a small
database with two keys into one table. DummyLM drives the ensemble's wiring only."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave.db import Database, ExecutionError
from sqlweave.programs.ensemble import EnsembleSQL
from sqlweave.programs.stages.joins import JoinCorrector, complete_joins, fk_path
from sqlweave.schema import introspect


@pytest.fixture()
def concert(demo_concert_db: Path) -> Database:
    return Database.open(demo_concert_db)


def _rows(db: Database, sql: str) -> list[tuple]:
    result = db.try_execute(sql)
    assert not isinstance(result, ExecutionError), result
    return sorted(result.rows)


def test_a_column_of_the_next_table_gets_its_join(concert: Database) -> None:
    stray = (
        "SELECT T2.Name FROM concert AS T1 JOIN singer_in_concert AS T2 "
        "ON T1.concert_ID = T2.concert_ID WHERE T1.Year = '2014'"
    )
    assert isinstance(concert.try_execute(stray), ExecutionError)
    fixed = complete_joins(stray, introspect(concert))
    assert fixed is not None and "JOIN singer AS J1 ON T2.Singer_ID = J1.Singer_ID" in fixed
    gold = (
        "SELECT T3.Name FROM concert AS T1 JOIN singer_in_concert AS T2 ON T1.concert_ID = "
        "T2.concert_ID JOIN singer AS T3 ON T2.Singer_ID = T3.Singer_ID WHERE T1.Year = '2014'"
    )
    # singer is one key away; stadium (which has a Name too) two: the shorter path wins
    assert _rows(concert, fixed) == _rows(concert, gold)


def test_an_unqualified_column_two_keys_away(concert: Database) -> None:
    stray = "SELECT count(*) FROM singer WHERE concert_Name = 'Super bootcamp'"
    fixed = complete_joins(stray, introspect(concert))
    assert fixed is not None and fixed.count("JOIN") == 2
    gold = (
        "SELECT count(*) FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.Singer_ID = "
        "T2.Singer_ID JOIN concert AS T3 ON T2.concert_ID = T3.concert_ID "
        "WHERE T3.concert_Name = 'Super bootcamp'"
    )
    assert _rows(concert, fixed) == _rows(concert, gold)


def test_what_runs_or_cannot_be_reached_is_left_alone(concert: Database) -> None:
    schema = introspect(concert)
    assert complete_joins("SELECT Name FROM singer", schema) is None
    assert complete_joins("SELECT nonesuch FROM singer", schema) is None  # exists nowhere
    assert complete_joins("SELEC nothing", schema) is None


@pytest.fixture()
def matches(tmp_path: Path) -> Database:
    path = tmp_path / "matches.sqlite"
    with sqlite3.connect(path) as con:
        con.executescript(
            """
            CREATE TABLE player (id INTEGER PRIMARY KEY, name TEXT);
            CREATE TABLE game (id INTEGER PRIMARY KEY, year INT,
                winner_id INT REFERENCES player(id), loser_id INT REFERENCES player(id));
            INSERT INTO player VALUES (1, 'Ann'), (2, 'Bo');
            INSERT INTO game VALUES (1, 2020, 1, 2);
            """
        )
    return Database.open(path)


def test_two_keys_into_one_table_need_the_question_to_choose(matches: Database) -> None:
    schema = introspect(matches)
    stray = "SELECT name FROM game WHERE year = 2020"
    assert complete_joins(stray, schema) is None  # winner or loser: a guess, so no join
    assert fk_path(schema, ["game"], ["player"]) is None
    fixed = complete_joins(stray, schema, question="Who was the loser in 2020?")
    assert fixed is not None and "loser_id" in fixed
    assert _rows(matches, fixed) == [("Bo",)]


def test_the_joins_corrector_repairs_failing_ensemble_candidates(concert: Database) -> None:
    question = "What are the names of the singers in concerts of 2014?"
    stray = (
        "SELECT T2.Name FROM concert AS T1 JOIN singer_in_concert AS T2 "
        "ON T1.concert_ID = T2.concert_ID WHERE T1.Year = '2014'"
    )
    other = "SELECT Name FROM singer"
    answers = [{"sql": stray}, {"sql": other}, {"sql": stray}, {"sql": other}]
    program = EnsembleSQL(
        generators="direct,sea", samples=2, repair="joins", repair_scope="all", greedy_weight=3
    )
    with dspy.context(lm=DummyLM(answers)):
        pred = program(question=question, db=concert)
    assert pred.candidate_origins[0] == "direct:greedy:repaired"
    assert "JOIN singer AS J1" in pred.sql  # two greedy votes of 3 beat two samples
    assert JoinCorrector()(sql=other, db=concert).sql == other


def test_direct_repairs_its_failing_sample_pool(concert: Database) -> None:
    from sqlweave.programs.direct import DirectSQL

    question = "How many singers performed in the concert Super bootcamp?"
    stray = "SELECT count(*) FROM singer WHERE concert_Name = 'Super bootcamp'"
    plain = DirectSQL(samples=2, corrector="none")
    mended = DirectSQL(samples=2, corrector="none", repair="joins")
    with dspy.context(lm=DummyLM([{"sql": stray}] * 2)):
        assert plain(question=question, db=concert).sql == stray
    with dspy.context(lm=DummyLM([{"sql": stray}] * 2)):
        pred = mended(question=question, db=concert)
    assert pred.sql.count("JOIN") == 2 and _rows(concert, pred.sql) == [(2,)]
    assert pred.candidate_origins == ["direct:greedy:repaired", "direct:sampled:repaired"]
    assert mended.switches["repair"] == "joins" and mended.switches["repair_scope"] == "fallback"


def test_schema_hints_say_where_a_missing_name_lives(concert: Database) -> None:
    from sqlweave.programs.stages.feedback import describe_execution, schema_hint

    stray = "SELECT T2.Name FROM concert AS T1 JOIN singer_in_concert AS T2 ON T1.concert_ID = T2.concert_ID"
    error = concert.try_execute(stray)
    assert isinstance(error, ExecutionError)
    hint = schema_hint(concert, stray, error)
    assert "Table singer_in_concert has no column Name; its columns: concert_ID, Singer_ID." in hint
    assert "Join singer_in_concert.Singer_ID = singer.Singer_ID." in hint
    lost = "SELECT name FROM singers"
    assert "the closest: singer" in schema_hint(concert, lost, concert.try_execute(lost))
    assert schema_hint(concert, "SELEC 1", concert.try_execute("SELEC 1")) == ""
    _, plain = describe_execution(concert, stray)
    _, hinted = describe_execution(concert, stray, hints=True)
    assert "Join" not in plain and hinted.startswith(plain) and hint in hinted


def test_the_execution_repair_shows_the_hint(concert: Database) -> None:
    from sqlweave.programs.stages.correction import CorrectionLoop

    stray = "SELECT T2.Name FROM concert AS T1 JOIN singer_in_concert AS T2 ON T1.concert_ID = T2.concert_ID"
    lm = DummyLM([{"corrected_sql": "SELECT Name FROM singer"}])
    with dspy.context(lm=lm):
        out = CorrectionLoop(max_rounds=1, schema_hints=True)(
            sql=stray, db=concert, question="Which singers sang in a concert?"
        )
    assert out.sql == "SELECT Name FROM singer"
    assert (
        "Join singer_in_concert.Singer_ID = singer.Singer_ID"
        in lm.history[-1]["messages"][-1]["content"]
    )


def test_a_schema_without_declared_keys_joins_on_the_keys_its_names_imply(tmp_path: Path) -> None:
    from sqlweave.programs.stages.joins import keys_of

    path = tmp_path / "plain.sqlite"
    with sqlite3.connect(path) as con:
        con.executescript(
            """
            CREATE TABLE author (author_id INT, name TEXT);
            CREATE TABLE book (id INTEGER PRIMARY KEY, author_id INT, title TEXT);
            CREATE TABLE review (id INT, book_id INT, stars INT);
            INSERT INTO author VALUES (1, 'Ann');
            INSERT INTO book VALUES (7, 1, 'Dune');
            INSERT INTO review VALUES (1, 7, 5);
            """
        )
    db = Database.open(path)
    schema = introspect(db)
    links = {(k.table, k.column, k.ref_table, k.ref_column) for k in keys_of(schema)}
    # author's key by its name, book's by its primary key "id" (named book_id elsewhere)
    assert links == {
        ("book", "author_id", "author", "author_id"),
        ("review", "book_id", "book", "id"),
    }
    fixed = complete_joins("SELECT name FROM review WHERE stars = 5", schema)
    assert fixed is not None and _rows(db, fixed) == [("Ann",)]


def test_a_string_sqlite_reads_in_a_comparison_gets_no_join(concert: Database) -> None:
    """Found by review: ``Theme = "Name"`` ran as a string comparison and the repair joined
    stadium for its Name column."""
    from sqlweave.programs.stages.joins import complete_joins

    sql = 'SELECT concert_Name FROM concert WHERE Theme = "Name"'
    assert complete_joins(sql, introspect(concert), "sqlite") is None
