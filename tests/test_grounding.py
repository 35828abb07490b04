"""The ``grounded`` selector (``programs/stages/grounding.py``) on a small SQLite database: candidates
comparing a column with a value it never stores drop out of the vote."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sqlweave.db import Database
from sqlweave.programs import stages
from sqlweave.programs.stages.grounding import GroundedSelector, ValueLookup, is_grounded
from sqlweave.programs.stages.sampling import settle_for
from sqlweave.programs.stages.voting import Candidates, VoteSelector

IL = "SELECT SUM(total) FROM invoices WHERE billing_state = 'IL'"
ILLINOIS = "SELECT SUM(total) FROM invoices WHERE billing_state = 'Illinois'"


@pytest.fixture()
def shop(tmp_path: Path) -> Database:
    path = tmp_path / "shop.sqlite"
    with sqlite3.connect(path) as con:
        con.executescript(
            """
            CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, state TEXT);
            CREATE TABLE invoices (id INTEGER PRIMARY KEY, customer_id INT, billing_state TEXT,
                total REAL, state TEXT);
            INSERT INTO customers VALUES (1, 'Ann', 'IL'), (2, 'Bo', 'NY');
            INSERT INTO invoices VALUES (1, 1, 'IL', 5.0, 'paid'), (2, 1, 'IL', 7.0, 'open'),
                (3, 2, 'NY', 1.0, 'paid');
            """
        )
    return Database.open(path)


def grounded(sql: str, db: Database) -> bool:
    return is_grounded(sql, ValueLookup(db))


def test_a_value_the_column_never_stores_is_not_grounded(shop: Database) -> None:
    assert grounded(IL, shop)
    assert not grounded(ILLINOIS, shop)
    assert not grounded("SELECT id FROM invoices WHERE 'Illinois' = billing_state", shop)


def test_case_does_not_count_against_a_value(shop: Database) -> None:
    # MageSQL's rules fix the case of a stored value; the vote should still hear it.
    assert grounded("SELECT id FROM invoices WHERE billing_state = 'il'", shop)


def test_aliases_and_subqueries_are_resolved(shop: Database) -> None:
    joined = (
        "SELECT T1.name FROM customers AS T1 JOIN invoices AS T2 ON T1.id = T2.customer_id "
        "WHERE T2.billing_state = '{}'"
    )
    assert grounded(joined.format("NY"), shop)
    assert not grounded(joined.format("New York"), shop)
    nested = "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM invoices AS i WHERE i.billing_state = 'Texas')"
    assert not grounded(nested, shop)


def test_each_scope_reads_its_own_aliases(shop: Database) -> None:
    # T1 is customers in one arm and invoices in the other, and both have a ``state``: each
    # value is looked up in the table its own arm reads ('NY' is no invoice's state).
    both_arms = (
        "SELECT T1.id FROM customers AS T1 WHERE T1.state = '{}' "
        "EXCEPT SELECT T1.customer_id FROM invoices AS T1 WHERE T1.state = '{}'"
    )
    assert grounded(both_arms.format("NY", "paid"), shop)
    assert not grounded(both_arms.format("NY", "unpaid"), shop)
    assert not grounded(both_arms.format("paid", "paid"), shop)


def test_a_cte_or_derived_table_is_not_looked_into(shop: Database) -> None:
    # The CTE shadows a stored table of the same name: its values are not the table's.
    assert grounded(
        "WITH customers AS (SELECT 'zz' AS state) SELECT * FROM customers WHERE state = 'zz'",
        shop,
    )
    assert grounded("SELECT * FROM (SELECT 'zz' AS s) AS d WHERE d.s = 'zz'", shop)


def test_a_value_equal_as_the_database_compares_it_is_grounded(shop: Database) -> None:
    # SQLite compares '5' with the stored REAL 5.0 as equal; lower-casing alone would not.
    assert grounded("SELECT id FROM invoices WHERE total = '5'", shop)
    assert not grounded("SELECT id FROM invoices WHERE total = '6'", shop)


def test_the_parsed_sql_is_left_as_it_was(shop: Database) -> None:
    from sqlweave.sqlstruct import parse

    sql = "SELECT T2.id FROM main.invoices AS T2 WHERE T2.billing_state = 'IL'"
    before = parse(sql).sql()
    assert grounded(sql, shop)
    assert parse(sql).sql() == before


def test_what_cannot_be_told_counts_as_grounded(shop: Database) -> None:
    # An unqualified column among two tables, a column that does not exist, a number, a LIKE,
    # and SQL that does not parse: none is held against the candidate.
    assert grounded(
        "SELECT name FROM customers JOIN invoices ON customers.id = customer_id "
        "WHERE billing_state = 'Texas'",
        shop,
    )
    assert grounded("SELECT id FROM invoices WHERE no_such_column = 'x'", shop)
    assert grounded("SELECT id FROM invoices WHERE total = 5", shop)
    assert grounded("SELECT id FROM invoices WHERE billing_state LIKE 'Texas%'", shop)
    assert grounded("SELECT FROM WHERE = 'Texas'", shop)


def test_the_vote_among_grounded_candidates_wins_over_a_guessed_majority(shop: Database) -> None:
    candidates = [ILLINOIS, ILLINOIS, ILLINOIS, IL]
    assert VoteSelector()(candidates=candidates, db=shop).sql == ILLINOIS  # 3 against 1
    out = stages.build("selector", "grounded")(candidates=candidates, db=shop, question="?")
    assert out.sql == IL and out.choice == 4 and out.kept == [3]
    assert out.lm_called is False


def test_with_no_grounded_candidate_every_candidate_votes(shop: Database) -> None:
    texas = "SELECT SUM(total) FROM invoices WHERE billing_state = 'Texas'"
    out = GroundedSelector()(candidates=[ILLINOIS, texas, texas], db=shop)
    assert out.kept == [0, 1, 2]
    assert out.sql == VoteSelector()(candidates=[ILLINOIS, texas, texas], db=shop).sql


def test_weights_and_known_outcomes_follow_the_kept_candidates(shop: Database) -> None:
    ny = "SELECT SUM(total) FROM invoices WHERE billing_state = 'NY'"
    # Weighted, NY would win over IL among the kept; the ungrounded one's weight is not counted.
    out = GroundedSelector()(candidates=[ILLINOIS, IL, ny], db=shop, weights=[10.0, 1.0, 2.0])
    assert out.kept == [1, 2] and out.sql == ny and out.choice == 3
    # The sampler's known outcomes reach the vote: told that IL's query returned what NY's
    # does, the vote sees two agreeing candidates and keeps the earlier.
    told = Candidates([ILLINOIS, IL, ny], {IL: shop.execute(ny)})
    out = GroundedSelector()(candidates=told, db=shop, weights=[10.0, 1.0, 1.5])
    assert out.sql == IL and out.choice == 2
    with pytest.raises(ValueError, match="2 weights for 3"):
        GroundedSelector()(candidates=[ILLINOIS, IL, ny], db=shop, weights=[1.0, 1.0])


def test_kept_candidates_that_fail_do_not_beat_dropped_ones_that_run(shop: Database) -> None:
    broken = "SELECT SUM(total) FROM invoices WHERE colour = 'red'"  # no such column
    out = GroundedSelector()(candidates=[broken, ILLINOIS, ILLINOIS], db=shop)
    assert out.sql == ILLINOIS and out.kept == [0, 1, 2]


def test_garbage_never_raises(shop: Database) -> None:
    deep = "SELECT " + "(" * 800 + "1" + ")" * 800
    out = GroundedSelector()(candidates=[deep, "not sql at all", IL], db=shop)
    assert out.sql == IL


def test_a_sampler_feeding_it_draws_every_candidate() -> None:
    # The settled-vote early stop is exact for the plain vote only.
    assert settle_for(VoteSelector())["settle"] is True
    assert settle_for(GroundedSelector()) == {}


def test_direct_takes_it_as_a_switch() -> None:
    from sqlweave.programs import get

    program = get("direct", samples=4, selector="grounded")
    assert isinstance(program.selector, GroundedSelector)


def test_on_duckdb(shop: Database, tmp_path: Path) -> None:
    pytest.importorskip("duckdb_engine")
    from sqlweave.transfer import copy_sqlite_to_duckdb

    target = copy_sqlite_to_duckdb(Path(shop.path), tmp_path / "shop.duckdb")
    with Database.open(f"duckdb:///{target}") as duck:
        assert duck.dialect == "duckdb"
        assert not grounded(ILLINOIS, duck) and grounded(IL, duck)
        assert grounded("SELECT id FROM invoices WHERE billing_state = 'il'", duck)
        out = GroundedSelector()(candidates=[ILLINOIS, ILLINOIS, IL], db=duck)
        assert out.sql == IL
