"""Narrowing a database for one question: scoped views, the automatic switch, a 1,000-table prompt."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import dspy
import pytest
from conftest import DEMO_CONCERT_DB, DEMO_ROOT
from dspy.utils import DummyLM

from sqlweave.data import load_spider
from sqlweave.db import Database
from sqlweave.schema import introspect, native_ddl, prompt_schema
from sqlweave.schema_filter import (
    estimate_tokens,
    narrow,
    scoped,
    visible_tables,
    whole_schema_tokens,
)

TOPICS = ["apple", "harbor", "violin", "glacier", "comet", "saddle", "lantern", "quartz"]


@pytest.fixture(autouse=True)
def bm25_only(monkeypatch):
    """The sentence encoder adds minutes on a 1,000-table schema; BM25 and values rank here."""
    monkeypatch.setattr("sqlweave.schema_filter.USE_EMBEDDINGS", False)


@pytest.fixture(scope="module")
def big_db(tmp_path_factory) -> Path:
    """1,001 tables: a thousand about other things, one about penguins (joined to islands)."""
    path = tmp_path_factory.mktemp("big") / "big.sqlite"
    conn = sqlite3.connect(path)
    for i in range(1000):
        topic = TOPICS[i % len(TOPICS)]
        conn.execute(
            f"CREATE TABLE {topic}_log_{i} (id INTEGER PRIMARY KEY, {topic}_count INTEGER, "
            f"note TEXT, recorded_on TEXT)"
        )
        conn.execute(f"INSERT INTO {topic}_log_{i} VALUES (1, {i}, 'n', '2020-01-01')")
    conn.execute("CREATE TABLE island (id INTEGER PRIMARY KEY, island_name TEXT)")
    conn.execute(
        "CREATE TABLE penguin_colony (id INTEGER PRIMARY KEY, penguin_count INTEGER, "
        "island_id INTEGER REFERENCES island(id))"
    )
    conn.execute("INSERT INTO island VALUES (1, 'Deception'), (2, 'Paulet')")
    conn.execute("INSERT INTO penguin_colony VALUES (1, 100, 1), (2, 250, 2)")
    conn.commit()
    conn.close()
    return path


def test_a_scoped_view_shows_only_its_tables_and_runs_any_sql():
    db = Database.open(DEMO_CONCERT_DB)
    view = scoped(db, ["Singer"])
    assert visible_tables(db) is None and visible_tables(view) == {"singer"}
    assert [t.name for t in introspect(view).tables] == ["singer"]
    assert "CREATE TABLE" in native_ddl(view) and "stadium" not in native_ddl(view)
    assert len(introspect(db).tables) == 4  # the whole schema is still cached whole
    assert view.execute("SELECT count(*) FROM stadium").rows  # SQL still reads the database


def test_auto_leaves_a_schema_that_fits_alone(big_db):
    db = Database.open(DEMO_CONCERT_DB)
    assert narrow(db, "How many singers are there?", budget_tokens=4096) is db
    assert narrow(db, "How many singers?", mode="off", budget_tokens=1) is db
    on = narrow(db, "How many singers are there?", mode="on", budget_tokens=4096)
    assert "singer" in visible_tables(on)
    with pytest.raises(ValueError, match="schema_filter"):
        narrow(db, "q", mode="sometimes")


def test_a_thousand_tables_are_narrowed_to_fit_the_budget(big_db):
    db = Database.open(big_db)
    budget = 1000
    assert whole_schema_tokens(db) > 20 * budget  # the whole schema could never be shown
    view = narrow(db, "How many penguins live on each island?", budget_tokens=budget)
    kept = visible_tables(view)
    assert {"penguin_colony", "island"} <= kept
    assert estimate_tokens(prompt_schema(view)) <= budget


@pytest.mark.parametrize("program", ["direct", "rsl", "mage", "pet", "dubo_v1", "sea", "weave"])
def test_every_program_answers_on_a_thousand_tables_within_the_window(big_db, program):
    """No program sends a prompt over the window: each call's text stays under the budget the
    engine's context allows (the LM here is a stand-in; the prompt is what is checked)."""
    from sqlweave.programs import get

    # a program with demos embeds its whole pool on first use (minutes on a CPU): a small one here
    with_pool = {"rsl", "mage", "pet", "weave"}
    switches = {"pool": load_spider("train", root=DEMO_ROOT)[:8]} if program in with_pool else {}
    lm = DummyLM({"": {"sql": "SELECT count(*) FROM penguin_colony"}})
    with dspy.context(lm=lm):
        out = get(program, **switches)(
            question="How many penguins live on each island?", db=str(big_db)
        )
    assert out.sql
    longest = max(len(str(call["messages"])) for call in lm.history)
    assert longest / 3.0 < 8192  # the default window, at a conservative 3 characters per token


def _db(tmp_path: Path, script: str) -> Database:
    path = tmp_path / "odd.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(script)
    return Database.open(path)


def test_a_foreign_key_in_other_letters_or_to_no_table_narrows(tmp_path: Path) -> None:
    """SQLite matches a key's table without regard to case and keeps a key to a missing table:
    the schema names the real table, drops the dangling key, and narrowing does not fail."""
    db = _db(
        tmp_path,
        "CREATE TABLE student(id INTEGER PRIMARY KEY, name TEXT);"
        "CREATE TABLE enrolment(sid INTEGER REFERENCES STUDENT(id), course TEXT,"
        " tid INTEGER REFERENCES teacher(id));"
        "CREATE TABLE grade(sid INTEGER REFERENCES Student, mark INTEGER);",
    )
    keys = {
        (fk.table, fk.column, fk.ref_table, fk.ref_column) for fk in introspect(db).foreign_keys
    }
    assert keys == {("enrolment", "sid", "student", "id"), ("grade", "sid", "student", "id")}
    narrowed = narrow(db, "which course is Ann in", mode="on")
    assert "enrolment" in native_ddl(narrowed)


def test_narrowing_a_database_with_no_tables_leaves_it_as_it_is(tmp_path: Path) -> None:
    db = _db(tmp_path, "CREATE VIEW v AS SELECT 1 AS one;")
    assert narrow(db, "how many?", mode="on") is db
