""" "Both X and Y" as an INTERSECT (``programs/stages/setops.py``): the rewrite on its own, and the
``rules_intersect`` corrector on a small SQLite database whose answer changes with it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sqlweave.db import Database
from sqlweave.programs import stages
from sqlweave.programs.stages.setops import IntersectCorrector, both_as_intersect

BOTH_Q = "Which customers have both 'On Road' and 'Shipped' orders?"


def test_a_two_value_list_becomes_an_intersect_of_each_value() -> None:
    sql = "SELECT customer_id FROM orders WHERE status IN ('On Road', 'Shipped') AND total > 1"
    assert both_as_intersect(sql, BOTH_Q) == (
        "SELECT customer_id FROM orders WHERE status = 'On Road' AND total > 1 "
        "INTERSECT SELECT customer_id FROM orders WHERE status = 'Shipped' AND total > 1"
    )


def test_a_subquery_is_split_inside_its_parentheses() -> None:
    sql = (
        "SELECT name FROM customers WHERE id IN "
        "(SELECT customer_id FROM orders WHERE status IN ('On Road', 'Shipped'))"
    )
    assert both_as_intersect(sql, BOTH_Q) == (
        "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders WHERE "
        "status = 'On Road' INTERSECT SELECT customer_id FROM orders WHERE status = 'Shipped')"
    )


def test_an_arm_of_an_intersect_is_split_intersection_being_associative() -> None:
    sql = "SELECT c FROM t WHERE y IN (1, 2) INTERSECT SELECT c FROM t WHERE y IN (1, 2)"
    assert both_as_intersect(sql, "c in both 1 and 2?") == (
        "SELECT c FROM t WHERE y = 1 INTERSECT SELECT c FROM t WHERE y = 2 "
        "INTERSECT SELECT c FROM t WHERE y IN (1, 2)"
    )


def test_the_list_in_the_where_is_split_not_its_twin_in_the_select_list() -> None:
    sql = "SELECT x IN ('p', 'q') AS f, a FROM t WHERE y = 1 AND x IN ('p', 'q')"
    assert both_as_intersect(sql, "a with both p and q?") == (
        "SELECT x IN ('p', 'q') AS f, a FROM t WHERE y = 1 AND x = 'p' "
        "INTERSECT SELECT x IN ('p', 'q') AS f, a FROM t WHERE y = 1 AND x = 'q'"
    )


@pytest.mark.parametrize(
    ("sql", "question"),
    [
        ("SELECT c FROM t WHERE y IN (1999, 2000)", "Which c had a y in 1999 and 2000?"),  # no cue
        ("SELECT c FROM t WHERE y IN (1999, 2000) OR z = 1", "c in both 1999 and 2000?"),
        ("SELECT c FROM t WHERE NOT y IN (1999, 2000)", "c in both 1999 and 2000?"),
        ("SELECT c FROM t WHERE y IN (1999, 2000, 2001)", "c in both 1999 and 2000?"),
        ("SELECT c FROM t WHERE y IN (1999, 2000) ORDER BY c", "c in both 1999 and 2000?"),
        ("SELECT c FROM t WHERE y IN (1, 2) GROUP BY c HAVING COUNT(DISTINCT y) = 2", "both 1, 2"),
        ("SELECT c FROM t WHERE y IN (SELECT y FROM u)", "c in both years?"),
        ("SELECT c FROM t WHERE y IN (1, 2) AND z IN (3, 4)", "c in both 1 and 2?"),  # which one?
        ("SELEC c FRM t", "both?"),
        # an arm of a compound: an INTERSECT there would apply to the UNION before it
        ("SELECT c FROM t UNION SELECT c FROM u WHERE y IN (1, 2)", "c in both 1 and 2?"),
        ("SELECT c FROM t WHERE y IN (1, 2) EXCEPT SELECT c FROM u", "c in both 1 and 2?"),
        ("WITH w AS (SELECT 1) SELECT c FROM t WHERE y IN (1, 2)", "c in both 1 and 2?"),
    ],
)
def test_what_does_not_read_both_as_either_is_left_alone(sql: str, question: str) -> None:
    assert both_as_intersect(sql, question) is None


@pytest.fixture()
def shop(tmp_path: Path) -> Database:
    path = tmp_path / "shop.sqlite"
    with sqlite3.connect(path) as con:
        con.executescript(
            """
            CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INT, status TEXT);
            INSERT INTO orders VALUES (1, 10, 'On Road'), (2, 10, 'Shipped'),
                (3, 11, 'On Road'), (4, 12, 'Shipped');
            """
        )
    return Database.open(path)


def test_the_corrector_keeps_the_rewrite_that_returns_rows(shop: Database) -> None:
    corrector = stages.build("corrector", "rules_intersect")
    assert isinstance(corrector, IntersectCorrector)
    sql = "SELECT customer_id FROM orders WHERE status IN ('on road', 'Shipped')"
    out = corrector(sql=sql, db=shop, question=BOTH_Q)
    # MageSQL's value rule first ('on road' is stored as 'On Road'), then the split.
    assert out.fired == ["fix_string_format", "both_as_intersect"]
    assert shop.execute(out.sql).rows == ((10,),)
    either = shop.execute("SELECT customer_id FROM orders WHERE status IN ('On Road', 'Shipped')")
    assert sorted(set(either.rows)) == [(10,), (11,), (12,)]  # what "either" answered
    assert out.history[-1]["feedback"].startswith("intersect")


def test_the_corrector_keeps_a_list_whose_intersect_is_empty(shop: Database) -> None:
    # "the statuses of both order 1 and order 2": a list, not a pair of conditions.
    sql = "SELECT status FROM orders WHERE id IN (1, 2)"
    out = IntersectCorrector()(sql=sql, db=shop, question="What are the statuses of both 1 and 2?")
    assert out.sql == sql
    assert "both_as_intersect" not in out.fired


def test_without_the_cue_it_is_the_rules_corrector(shop: Database) -> None:
    sql = "SELECT customer_id FROM orders WHERE status IN ('On Road', 'Shipped')"
    out = IntersectCorrector()(sql=sql, db=shop, question="Which customers have orders?")
    assert out.sql == sql and out.fired == [] and out.history == []
