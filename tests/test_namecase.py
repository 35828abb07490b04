"""Bare names on a case-folding engine (``sqlweave.namecase``): PostgreSQL reads ``Shop`` as
``shop``, so a model that drops the quotes of an ORM's ``"Shop"`` fails every query; the query
that runs (and the one a program returns) quotes the names only their capitals can mean."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
from conftest import DEMO_CONCERT_DB, pg_schema
from dspy.utils import DummyLM

from sqlweave.db import Database
from sqlweave.namecase import CaseNames, fit_case

NAMES = CaseNames.of(
    [
        ("Shop", [("ShopId", "INTEGER", "number"), ("ShopName", "TEXT", "text")], [], []),
        ("Sale", [("SaleId", "INTEGER", "number"), ("ShopId", "INTEGER", "number")], [], []),
        ("city", [("name", "TEXT", "text"), ("Name", "TEXT", "text")], [], []),
    ]
)


def test_only_names_a_bare_spelling_cannot_reach_are_kept() -> None:
    assert NAMES.tables == {"shop": "Shop", "sale": "Sale"}
    # "name" and "Name" both exist: a bare name already means the first, so neither is fitted.
    assert NAMES.columns == {"shopid": "ShopId", "shopname": "ShopName", "saleid": "SaleId"}
    assert not CaseNames.of([("city", [("name", "TEXT", "text")], [], [])])


@pytest.mark.parametrize(
    ("sql", "fitted"),
    [
        ("SELECT ShopName FROM Shop", 'SELECT "ShopName" FROM "Shop" AS Shop'),
        (
            "SELECT T2.ShopName FROM Sale AS T1 JOIN Shop AS T2 ON T1.ShopId = T2.ShopId",
            'SELECT T2."ShopName" FROM "Sale" AS T1 JOIN "Shop" AS T2 ON T1."ShopId" = T2."ShopId"',
        ),
        ('SELECT Shop.ShopName FROM "Shop"', 'SELECT "Shop"."ShopName" FROM "Shop"'),
        ('SELECT "ShopName" FROM "Shop"', 'SELECT "ShopName" FROM "Shop"'),  # already right
        ("SELECT name FROM city", "SELECT name FROM city"),  # nothing to fit
        ("WITH shop AS (SELECT 1 AS x) SELECT x FROM shop", None),  # the query's own name
        ("SELECT count(*) AS shopname FROM city ORDER BY shopname", None),  # an output alias
        # the aliased column itself is no reference to the alias (it failed on PostgreSQL)
        (
            "SELECT ShopName AS shopname FROM Shop ORDER BY shopname",
            'SELECT "ShopName" AS shopname FROM "Shop" AS Shop ORDER BY shopname',
        ),
        # a subquery's or a CTE's alias is a column to the outer SELECT: left as written
        ("WITH t AS (SELECT count(*) AS shopname FROM city) SELECT shopname FROM t", None),
        ("SELECT s.shopname FROM (SELECT count(*) AS shopname FROM city) AS s", None),
        ("SELECT ShopName FROM", None),  # does not parse: as written
        ("SELECT " + "(" * 3000 + "ShopId" + ")" * 3000, None),  # too deep to parse: as written
    ],
)
def test_fit_case_quotes_what_only_capitals_can_mean(sql: str, fitted: str | None) -> None:
    assert fit_case(sql, NAMES) == (sql if fitted is None else fitted)


def test_sqlite_runs_and_returns_queries_as_written() -> None:
    with Database.open(DEMO_CONCERT_DB) as db:
        sql = "SELECT Name FROM Singer"
        assert db.runnable(sql) == sql and not db.backend.case_names()
        assert db.execute(sql).rows


@pytest.fixture
def orm_db() -> Iterator[Database]:
    """Tables as an ORM makes them, on the loopback PostgreSQL of ``.ci/postgres.sh``."""
    with (
        pg_schema(
            "orm_names",
            'CREATE TABLE "Shop" ("ShopId" int PRIMARY KEY, "ShopName" text, "Staff" int)',
            'CREATE TABLE "Sale" ("SaleId" int PRIMARY KEY, "ShopId" int REFERENCES "Shop", '
            '"Amount" int)',
            "INSERT INTO \"Shop\" VALUES (1, 'Alpha', 3), (2, 'Beta', 7)",
            'INSERT INTO "Sale" VALUES (1, 1, 10), (2, 2, 20), (3, 2, 5)',
        ) as url,
        Database.open(url) as db,
    ):
        yield db


@pytest.mark.postgres
def test_a_bare_query_runs_on_an_orms_postgres_tables(orm_db: Database) -> None:
    sql = "SELECT T2.ShopName, sum(T1.Amount) FROM Sale AS T1 JOIN Shop AS T2 ON T1.ShopId = T2.ShopId GROUP BY T2.ShopName ORDER BY T2.ShopName"
    assert orm_db.execute(sql).rows == (("Alpha", 10), ("Beta", 25))
    assert orm_db.execute("SELECT count(*) FROM Shop WHERE Staff > 5").rows == ((1,),)
    aliased = "SELECT ShopName AS shopname FROM Shop ORDER BY shopname DESC"
    assert orm_db.execute(aliased).rows == (("Beta",), ("Alpha",))
    # A name that exists nowhere still fails as it would have.
    from sqlweave.db import ExecutionError

    with pytest.raises(ExecutionError, match="shops"):
        orm_db.execute("SELECT count(*) FROM Shops")
    # Too deep to fit is the guard's clear error, not a crash.
    with pytest.raises(ExecutionError, match="nested too deeply"):
        orm_db.execute("SELECT " + "(" * 3000 + "ShopId" + ")" * 3000 + " FROM Shop")


@pytest.mark.postgres
def test_a_program_returns_the_query_that_ran(orm_db: Database, tmp_path: Path) -> None:
    import sqlweave

    lm: Any = DummyLM({"": {"sql": "SELECT ShopName FROM Shop WHERE Staff > 5"}})
    with dspy.context(lm=lm):
        result = sqlweave.ask("Which shops have more than five staff?", orm_db, program="direct")
    assert result.error is None, result.error
    assert result.rows == (("Beta",),)
    assert result.sql == 'SELECT "ShopName" FROM "Shop" AS Shop WHERE "Staff" > 5'
