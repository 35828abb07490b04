"""Short table names for a narrowed view of one namespace, and the SQL mapped back (real SQLite)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave.db import Database
from sqlweave.programs import get
from sqlweave.programs.stages.rules import apply_rules
from sqlweave.schema import introspect, native_ddl, prompt_schema
from sqlweave.schema_filter import narrow, scoped
from sqlweave.tablenames import ddl_with_short_names, short_names, to_real

SHOP = ["shop__customer", "shop__orders"]


@pytest.fixture(autouse=True)
def bm25_only(monkeypatch):
    monkeypatch.setattr("sqlweave.schema_filter.USE_EMBEDDINGS", False)


@pytest.fixture()
def namespaced(tmp_path) -> Path:
    """Two applications in one file: a shop (customers, their orders) and HR."""
    path = tmp_path / "apps.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE shop__customer (id INTEGER PRIMARY KEY, full_name TEXT, city TEXT);
        CREATE TABLE shop__orders (id INTEGER PRIMARY KEY, amount REAL,
            customer_id INTEGER REFERENCES shop__customer(id));
        CREATE TABLE hr__employee (id INTEGER PRIMARY KEY, full_name TEXT, salary REAL);
        INSERT INTO shop__customer VALUES (1, 'Ada', 'Paris'), (2, 'Bo', 'Oslo');
        INSERT INTO shop__orders VALUES (1, 10.0, 1), (2, 5.0, 1), (3, 7.5, 2);
        INSERT INTO hr__employee VALUES (1, 'Cy', 100.0);
        """
    )
    conn.commit()
    conn.close()
    return path


def test_only_one_shared_double_underscore_namespace_is_dropped():
    assert short_names(SHOP) == {"shop__customer": "customer", "shop__orders": "orders"}
    assert short_names(["shop__customer", "hr__employee"]) == {}  # two applications
    assert short_names(["student_course", "student_grade"]) == {}  # "_" is part of names
    assert short_names(["a__x", "a__X"]) == {}  # short names would collide
    assert short_names(["a__x", "plain"]) == {}


def test_sql_with_short_names_is_mapped_to_real_ones():
    aliases = {"customer": "shop__customer", "orders": "shop__orders"}
    sql = "SELECT customer.full_name FROM customer JOIN orders AS o ON o.customer_id = customer.id"
    real = to_real(sql, aliases)
    assert '"shop__customer" AS customer' in real and '"shop__orders" AS o' in real
    assert to_real("WITH orders AS (SELECT 1) SELECT * FROM orders", aliases).endswith(
        "FROM orders"
    )
    assert to_real("SELECT * FROM shop__orders", aliases) == "SELECT * FROM shop__orders"
    assert to_real("SELEC nonsense FROM (", aliases) == "SELEC nonsense FROM ("
    ddl = 'CREATE TABLE "shop__orders" (x INTEGER REFERENCES shop__customer(id))'
    assert ddl_with_short_names(ddl, {"shop__orders": "orders", "shop__customer": "customer"}) == (
        'CREATE TABLE "orders" (x INTEGER REFERENCES customer(id))'
    )


def test_a_short_name_that_is_a_keyword_is_quoted_in_sql_and_in_the_ddl(tmp_path):
    """``shop__order`` shown as ``order``: SQL written with ``"order"`` keeps its quotes as the
    alias, and the DDL the model reads quotes the name as SQL must write it."""
    aliases = {"order": "shop__order", "group": "shop__group"}
    assert to_real('SELECT "order".total FROM "order"', aliases) == (
        'SELECT "order".total FROM "shop__order" AS "order"'
    )
    assert to_real('SELECT "Group".x FROM "Group"', aliases).endswith('AS "Group"')
    ddl = "CREATE TABLE shop__order (id INTEGER, g INTEGER REFERENCES shop__group(id))"
    assert ddl_with_short_names(ddl, {"shop__order": "order", "shop__group": "group"}) == (
        'CREATE TABLE "order" (id INTEGER, g INTEGER REFERENCES "group"(id))'
    )
    path = tmp_path / "shop.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE shop__order (id INTEGER PRIMARY KEY, total REAL);"
            "CREATE TABLE shop__group (id INTEGER PRIMARY KEY);"
            "INSERT INTO shop__order VALUES (1, 9.5);"
        )
    view = scoped(Database.open(path), ["shop__order", "shop__group"], short=True)
    assert 'CREATE TABLE "order"' in native_ddl(view)
    assert view.execute('SELECT "order".total FROM "order"').rows == ((9.5,),)


def test_a_view_of_one_namespace_reads_and_runs_under_short_names(namespaced):
    db = Database.open(namespaced)
    view = scoped(db, SHOP, short=True)
    assert [t.name for t in introspect(view).tables] == ["customer", "orders"]
    assert {(fk.table, fk.ref_table) for fk in introspect(view).foreign_keys} == {
        ("orders", "customer")
    }
    ddl = native_ddl(view)
    assert "CREATE TABLE customer" in ddl and "shop__" not in ddl and "employee" not in ddl
    assert "shop__" not in prompt_schema(view, "compact")
    assert native_ddl(view, ["orders"]).count("CREATE TABLE") == 1
    assert view.execute("SELECT count(*) FROM orders").rows == ((3,),)
    assert view.execute("SELECT count(*) FROM shop__orders").rows == ((3,),)  # real names run
    # the whole database is untouched: its schema and SQL keep the real names
    assert "shop__customer" in [t.name for t in introspect(db).tables]
    with pytest.raises(Exception, match="no such table"):
        db.execute("SELECT count(*) FROM orders")
    # MageSQL's value rule reads stored values through the short names
    fixed = apply_rules("SELECT id FROM customer WHERE city = 'paris'", view)
    assert "'Paris'" in fixed.sql


def test_a_program_on_a_narrowed_namespace_returns_sql_for_the_real_database(namespaced):
    db = Database.open(namespaced)
    program = get("direct")
    program.schema_filter = "on"
    view = narrow(db, "What is the total amount of orders of each customer?", mode="on")
    assert view.table_aliases == {"customer": "shop__customer", "orders": "shop__orders"}
    answer = (
        "SELECT customer.full_name, SUM(orders.amount) FROM customer "
        "JOIN orders ON orders.customer_id = customer.id GROUP BY customer.full_name"
    )
    with dspy.context(lm=DummyLM([{"sql": answer}] * 4)):
        pred = program(question="What is the total amount of orders of each customer?", db=db)
    assert "shop__customer" in pred.sql and "shop__orders" in pred.sql
    assert sorted(db.execute(pred.sql).rows) == [("Ada", 15.0), ("Bo", 7.5)]


@pytest.mark.parametrize(
    "program", ["direct", "rsl", "mage", "pet", "dubo_v1", "dubo_v2", "sea", "weave", "ensemble"]
)
def test_every_program_returns_real_names_from_a_short_named_view(namespaced, program):
    """Whatever a program does on a view of one namespace (links, values, repairs, votes), the
    SQL it returns names the real tables, so it runs on the database (a stand-in LM answers)."""
    from conftest import DEMO_ROOT

    from sqlweave.data import load_spider

    with_pool = {"rsl", "mage", "pet", "weave", "dubo_v2"}
    switches = {"pool": load_spider("train", root=DEMO_ROOT)[:8]} if program in with_pool else {}
    built = get(program, **switches)
    built.schema_filter = "on"
    lm = DummyLM({"": {"sql": "SELECT count(*) FROM orders"}})
    with dspy.context(lm=lm):
        out = built(question="How many orders are there?", db=str(namespaced))
    assert "shop__orders" in out.sql
    assert Database.open(namespaced).execute(out.sql).rows == ((3,),)
    assert all("CREATE TABLE shop__" not in str(call["messages"]) for call in lm.history)


def test_stored_values_are_named_by_the_view_s_short_tables(namespaced):
    from sqlweave.values import ValueIndex

    db = Database.open(namespaced)
    view = scoped(db, SHOP, short=True)
    assert ("customer", "city", "Paris") in ValueIndex.build(view).mentioned("Who lives in Paris?")
    assert ("shop__customer", "city", "Paris") in ValueIndex.build(db).mentioned("in Paris?")
    # so a linker that keeps the tables holding a named value keeps the short-named one
    linker = get("direct", linker="values").linker
    out = linker(question="Which customers live in Paris?", schema=introspect(view), db=view)
    assert [t.name for t in out.schema.tables] == ["customer"]
