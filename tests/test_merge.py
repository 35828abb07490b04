"""Merged databases: tables renamed with their keys, gold SQL rewritten, the merged slices."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from sqlweave.data import MERGED_DB_ID, build_merged_slice
from sqlweave.merge import (
    MergeError,
    check_rewrite,
    merge_databases,
    merged_name,
    rewrite_sql,
)


def _make_db(path: Path, script: str) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(script)
    conn.commit()
    conn.close()
    return path


@pytest.fixture()
def two_dbs(tmp_path: Path) -> dict[str, Path]:
    shop = _make_db(
        tmp_path / "shop.sqlite",
        """
        CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE "order" (id INTEGER PRIMARY KEY, customer_id INTEGER
            REFERENCES customer(id), total REAL);
        CREATE INDEX by_customer ON "order"(customer_id);
        INSERT INTO customer VALUES (1, 'Ann'), (2, 'Bo');
        INSERT INTO "order" VALUES (10, 1, 5.0), (11, 1, 7.5), (12, 2, 1.0);
        """,
    )
    # the same table and index names in a second database: they must not collide
    school = _make_db(
        tmp_path / "school.sqlite",
        """
        CREATE TABLE customer (id INTEGER PRIMARY KEY, grade INTEGER);
        CREATE INDEX by_customer ON customer(grade);
        INSERT INTO customer VALUES (1, 3);
        """,
    )
    return {"shop": shop, "school": school}


def test_merge_keeps_rows_keys_and_indexes_under_new_names(tmp_path, two_dbs):
    merged = merge_databases(two_dbs, tmp_path / "out" / "merged.sqlite")
    assert merged.n_tables == 3
    assert merged.renames["shop"] == {"customer": "shop__customer", "order": "shop__order"}
    conn = sqlite3.connect(merged.path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"shop__customer", "shop__order", "school__customer"}
    fks = conn.execute('PRAGMA foreign_key_list("shop__order")').fetchall()
    assert [(fk[2], fk[3], fk[4]) for fk in fks] == [("shop__customer", "customer_id", "id")]
    pk = [r[1] for r in conn.execute('PRAGMA table_info("shop__customer")') if r[5]]
    assert pk == ["id"]
    indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert {"shop__by_customer", "school__by_customer"} <= indexes
    assert conn.execute('SELECT count(*) FROM "shop__order"').fetchone() == (3,)
    conn.close()


def test_merge_refuses_views_and_missing_files(tmp_path, two_dbs):
    with pytest.raises(MergeError, match="no database file"):
        merge_databases({"gone": tmp_path / "nope.sqlite"}, tmp_path / "m.sqlite")
    viewed = _make_db(
        tmp_path / "v.sqlite", "CREATE TABLE t (a); CREATE VIEW v AS SELECT a FROM t;"
    )
    with pytest.raises(MergeError, match="views"):
        merge_databases({"v": viewed}, tmp_path / "m.sqlite")
    with pytest.raises(MergeError, match="may not contain"):
        merge_databases({"a__b": two_dbs["shop"]}, tmp_path / "m.sqlite")
    assert not (tmp_path / "m.sqlite").exists()  # nothing half-built is left behind


def test_rewrite_renames_tables_and_qualifiers_not_aliases(tmp_path, two_dbs):
    renames = {"customer": "shop__customer", "order": "shop__order"}
    sql = (
        "SELECT customer.name, count(*) FROM customer JOIN `order` AS T2 "
        "ON customer.id = T2.customer_id GROUP BY customer.name ORDER BY customer.name"
    )
    new = rewrite_sql(sql, renames)
    assert '"shop__customer".name' in new
    assert '"shop__order" AS T2' in new
    assert "T2.customer_id" in new
    merged = merge_databases(two_dbs, tmp_path / "m.sqlite")
    assert check_rewrite(sql, two_dbs["shop"], new, merged.path)


def test_check_rewrite_catches_a_rewrite_that_means_something_else(tmp_path, two_dbs):
    merged = merge_databases(two_dbs, tmp_path / "m.sqlite")
    original = "SELECT id FROM customer"
    # school's customer table: same name, other rows
    wrong = rewrite_sql(original, {"customer": "school__customer"})
    assert not check_rewrite(original, two_dbs["shop"], wrong, merged.path)
    # an order the original asks for must be kept
    ordered = "SELECT name FROM customer ORDER BY name DESC"
    flipped = 'SELECT name FROM "shop__customer" ORDER BY name ASC'
    assert not check_rewrite(ordered, two_dbs["shop"], flipped, merged.path)
    assert not check_rewrite(original, two_dbs["shop"], "SELECT nope", merged.path)


def test_merged_name_is_db_then_table():
    assert merged_name("wta_1", "players") == "wta_1__players"


@pytest.fixture()
def merged_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SQLWEAVE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize(
    "name", ["spider-dev-200-merged", "bird-52-merged", "spider-train-val-merged"]
)
def test_committed_merged_slices_match_a_fresh_build(name, data_root, merged_cache):
    """The committed ids and rewritten gold SQL are what the build computes today, every rewrite
    returning the original query's rows (checked inside the build)."""
    from sqlweave.data import SLICES_DIR

    committed = json.loads((SLICES_DIR / f"{name}.json").read_text(encoding="utf-8"))
    fresh = build_merged_slice(name, root=data_root)
    assert fresh == committed
    assert len(committed["databases"]) == 48
    assert committed["n_tables"] >= 150
    assert not committed["dropped"]


def test_load_merged_slice_asks_the_base_questions_of_the_merged_file(data_root, merged_cache):
    from sqlweave.data import load_slice, slice_ids

    merged = load_slice("spider-dev-200-merged", root=data_root)
    base = load_slice("spider-dev-200", root=data_root)
    assert [str(ex.question_id) for ex in merged] == slice_ids("spider-dev-200-merged")
    assert [ex.question for ex in merged] == [ex.question for ex in base]
    assert {ex.db_id for ex in merged} == {MERGED_DB_ID}
    assert {ex.source_db_id for ex in merged} == {ex.db_id for ex in base}
    assert Path(merged[0].db_path).is_relative_to(merged_cache)
    assert merged[0].inputs().keys() == base[0].inputs().keys()
    # the gold query of each question answers the same on the merged file as on its own database
    for ex, orig in list(zip(merged, base, strict=True))[:25]:
        assert check_rewrite(orig.gold_sql, orig.db_path, ex.gold_sql, ex.db_path)


def test_merge_reads_any_path_and_takes_triggers_and_any_id(tmp_path):
    """Found by review: a '#' in a folder cut the read-only URI short (an empty merged file and
    stray files), two sources' triggers of one name collided, and an id 'merged' named its copy
    as the file being built."""
    odd = tmp_path / "x#y?z"
    odd.mkdir()
    script = """
        CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE log (n INTEGER);
        CREATE TRIGGER tr AFTER INSERT ON singer BEGIN INSERT INTO log VALUES (1); END;
        INSERT INTO singer VALUES (1, 'Ann');
    """
    one = _make_db(odd / "one.sqlite", script)
    two = _make_db(tmp_path / "two.sqlite", script)
    out = tmp_path / "out" / "m.sqlite"
    merge_databases({"one": one, "merged": two}, out)
    conn = sqlite3.connect(out)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        rows = conn.execute(f'SELECT name FROM "{merged_name("one", "singer")}"').fetchall()
    finally:
        conn.close()
    assert {merged_name("one", "singer"), merged_name("merged", "singer")} <= names
    assert rows == [("Ann",)]
    assert not (Path.cwd() / "x").exists()
