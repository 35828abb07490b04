"""Schema introspection, lookup, linked subsets and the renderers (snapshot-tested)."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import duckdb_url, pg_schema

from sqlweave.db import Database, ExecutionError
from sqlweave.schema import (
    Schema,
    clear_cache,
    introspect,
    native_ddl,
    render_columns,
    render_compact,
    render_ddl,
    render_ddl_with_rows,
    render_pet,
)
from sqlweave.schema.render import ident, quote

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "schema"

#: BIRD-style descriptions in the encodings BIRD ships: UTF-8 with a BOM, and Windows-1252.
DESCRIPTIONS = {
    "singer.csv": (
        "utf-8-sig",
        "original_column_name,column_name,column_description,data_format,value_description\n"
        "Singer_ID,singer id,the unique id of the singer,integer,\n"
        "Name,,the stage name of the singer,text,\n"
        'Country,,"the country the singer\ncomes from",text,"full English country names,\n'
        "e.g. 'United States'\"\n"
        "Home Town ,home town,,text,\n",
    ),
    "Concert.csv": (
        "cp1252",
        "original_column_name,column_name,column_description,data_format,value_description\n"
        "concert_id,,the concert id,integer,\n"
        "YEAR,,year of the concert (caf\u00e9 season),text,four digits\n",
    ),
}


def build_fixture_db(folder: Path, *, descriptions: bool = True) -> Path:
    """Create the fixture SQLite file (and BIRD description CSVs) under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "concert_fixture.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript((FIXTURES / "fixture.sql").read_text(encoding="utf-8"))
    conn.close()
    if descriptions:
        desc = folder / "database_description"
        desc.mkdir()
        for name, (encoding, text) in DESCRIPTIONS.items():
            (desc / name).write_bytes(text.encode(encoding))
    return path


@pytest.fixture
def fixture_db(tmp_path: Path):
    clear_cache()
    db = Database.open(build_fixture_db(tmp_path / "concert_fixture"))
    yield db
    db.close()


@pytest.fixture
def schema(fixture_db: Database) -> Schema:
    return introspect(fixture_db)


def check_snapshot(name: str, text: str) -> None:
    """Compare with tests/fixtures/schema/<name>; SQLWEAVE_UPDATE_SNAPSHOTS=1 rewrites it."""
    path = FIXTURES / name
    if os.environ.get("SQLWEAVE_UPDATE_SNAPSHOTS") == "1":
        path.write_text(text + "\n", encoding="utf-8")
    assert path.is_file(), f"missing snapshot {path}; run with SQLWEAVE_UPDATE_SNAPSHOTS=1"
    assert text + "\n" == path.read_text(encoding="utf-8")


# --- introspection ---------------------------------------------------------------------------------


def test_introspect_tables_keys_and_types(schema: Schema) -> None:
    assert schema.db_id == "concert_fixture"
    assert schema.dialect == "sqlite"
    assert schema.table_names == ["concert", "empty_log", "singer", "singer in concert"]
    link = schema.find_table("singer in concert")
    assert link is not None
    assert link.primary_key == ["concert_id", "Singer_ID"]
    assert {(fk.table, fk.column, fk.ref_table, fk.ref_column) for fk in schema.foreign_keys} == {
        ("singer in concert", "concert_id", "concert", "concert_id"),
        ("singer in concert", "Singer_ID", "singer", "Singer_ID"),
    }
    singer = schema.find_table("singer")
    assert singer is not None
    kinds = {c.name: (c.type, c.kind) for c in singer.columns}
    assert kinds["Age"] == ("INTEGER", "number")
    assert kinds["Country"] == ("VARCHAR(20)", "text")
    assert kinds["Net Worth"] == ("REAL", "number")


def test_introspect_samples_skip_nulls_and_rows_align(fixture_db: Database) -> None:
    schema = introspect(fixture_db, sample_rows=2, distinct_values=3)
    hometown = schema.find_column("singer", "home town")
    assert hometown is not None
    assert None not in hometown.samples
    assert len(hometown.samples) == 3
    singer = schema.find_table("singer")
    assert singer is not None
    assert len(singer.sample_rows) == 2
    assert singer.sample_rows[0][singer.column_names.index("Name")] == "Joe Sharp"
    empty = schema.find_table("empty_log")
    assert empty is not None and empty.sample_rows == []


def test_bird_descriptions_with_bom_and_cp1252(schema: Schema) -> None:
    country = schema.find_column("singer", "Country")
    assert country is not None
    assert country.description == "the country the singer comes from"
    assert country.value_description.startswith("full English country names")
    # The expanded name stands in for a missing description; the BOM did not eat the header.
    assert schema.find_column("singer", "Home Town").description == "home town"
    assert schema.find_column("singer", "Singer_ID").description == "the unique id of the singer"
    # File name and column name matched case-insensitively; cp1252 decoded.
    year = schema.find_column("concert", "Year")
    assert year.description == "year of the concert (caf\u00e9 season)"
    assert year.value_description == "four digits"
    assert schema.find_column("concert", "theme").description == ""


def test_explicit_description_dir_and_none(tmp_path: Path) -> None:
    clear_cache()
    path = build_fixture_db(tmp_path / "a", descriptions=False)
    desc_src = build_fixture_db(tmp_path / "b").parent / "database_description"
    with Database.open(path) as db:
        assert introspect(db).find_column("concert", "Year").description == ""
        assert introspect(db, description_dir=desc_src).find_column("concert", "Year").description


def test_introspect_is_cached_per_database(fixture_db: Database) -> None:
    assert introspect(fixture_db) is introspect(fixture_db)
    assert introspect(fixture_db, sample_rows=1) is not introspect(fixture_db)
    first = introspect(fixture_db)
    clear_cache()
    assert introspect(fixture_db) is not first
    assert introspect(fixture_db) == first


def test_duckdb_introspection(tmp_path: Path) -> None:
    url = duckdb_url(
        tmp_path / "t.duckdb",
        'CREATE TABLE a (id INTEGER PRIMARY KEY, "Full Name" VARCHAR)',
        "CREATE TABLE b (id INTEGER, a_id INTEGER REFERENCES a(id), PRIMARY KEY (id, a_id))",
        "INSERT INTO a VALUES (1, 'x'), (2, NULL)",
    )
    with Database.open(url) as db:
        schema = introspect(db)
    assert schema.table_names == ["a", "b"]
    assert schema.find_table("b").primary_key == ["id", "a_id"]
    assert [(fk.table, fk.column, fk.ref_table, fk.ref_column) for fk in schema.foreign_keys] == [
        ("b", "a_id", "a", "id")
    ]
    assert schema.find_column("a", "full name").kind == "text"
    assert schema.find_column("a", "Full Name").samples == ["x"]


# --- lookup and subsets -------------------------------------------------------------------------------


def test_case_insensitive_lookup(schema: Schema) -> None:
    assert schema.find_table("SINGER").name == "singer"
    assert schema.find_table('"Singer In Concert"').name == "singer in concert"
    assert schema.find_table("`concert`").name == "concert"
    assert schema.find_table("nope") is None
    assert schema.find_column("Singer", "singer_id").name == "Singer_ID"
    assert schema.find_column("nope", "x") is None
    assert len(schema.all_columns()) == sum(len(t.columns) for t in schema.tables) == 15


def test_subset_keeps_keys_and_joinable_fks(schema: Schema) -> None:
    small = schema.subset({"SINGER": ["name"], "singer in concert": None, "ghost": None})
    assert small.table_names == ["singer", "singer in concert"]
    singer = small.find_table("singer")
    # Singer_ID stays: it is the primary key and the target of a kept foreign key.
    assert singer.column_names == ["Singer_ID", "Name"]
    assert singer.sample_rows[0] == (1, "Joe Sharp")
    assert [(fk.table, fk.ref_table) for fk in small.foreign_keys] == [
        ("singer in concert", "singer")
    ]
    bare = schema.subset(columns=["singer.Name", ("concert", "THEME")], keep_keys=False)
    assert [t.column_names for t in bare.tables] == [["theme"], ["Name"]]
    assert bare.foreign_keys == []
    assert schema.subset(tables=["concert"]).find_table("concert") is schema.find_table("concert")
    # The original is untouched.
    assert len(schema.find_table("singer").columns) == 6


def test_ident_quotes_only_when_needed() -> None:
    assert ident("singer") == "singer"
    assert ident("Home Town") == '"Home Town"'
    assert ident("order") == '"order"'
    assert ident('we"ird') == '"we""ird"'


def test_postgres_names_with_capitals_are_quoted_where_a_bare_name_would_fold() -> None:
    assert ident("FullName", "postgres") == '"FullName"'
    assert ident("full_name", "postgres") == "full_name"
    assert ident("FullName") == ident("FullName", "duckdb") == "FullName"  # no folding there


@pytest.fixture
def pg_engine() -> Any:
    """A SQLAlchemy engine on the loopback PostgreSQL of ``.ci/postgres.sh`` (skipped without)."""
    url = os.environ.get("SQLWEAVE_PG_URL")
    if not url:
        pytest.skip('SQLWEAVE_PG_URL is not set (run: eval "$(.ci/postgres.sh)")')
    import sqlalchemy as sa

    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    yield engine
    engine.dispose()


@pytest.mark.postgres
def test_every_layout_names_a_mixed_case_postgres_table_so_it_runs() -> None:
    """A PostgreSQL table an ORM made (``"People"."FullName"``): the names each layout shows
    are the names a query must use, so the query the model copies from the prompt runs."""
    import re

    with (
        pg_schema(
            "camel_case",
            'CREATE TABLE "People" ("PersonId" int PRIMARY KEY, "FullName" text)',
            "INSERT INTO \"People\" VALUES (1, 'Ann')",
        ) as url,
        Database.open(url) as db,
    ):
        schema = introspect(db)
        for render in (
            render_ddl,
            render_ddl_with_rows,
            render_pet,
            render_compact,
            render_columns,
        ):
            text = render(schema)
            table = '"People"' if '"People"' in text else "People"
            column = '"FullName"' if '"FullName"' in text else "FullName"
            assert re.search(r'(?<![\w"])People(?![\w"])', text) is None, (render, text)
            # As written (Database.execute would quote bare capitals itself): the backend runs it.
            deadline = time.monotonic() + 10
            assert db.backend.run(f"SELECT {column} FROM {table}", deadline, None, None)[1] == (
                ("Ann",),
            )


# --- renderers -------------------------------------------------------------------------------------


def test_render_ddl_snapshot(schema: Schema) -> None:
    check_snapshot("ddl.sql", render_ddl(schema, layout="pretty"))


def test_render_ddl_compact_snapshot(schema: Schema) -> None:
    """The default layout: one line per table, every identifier double-quoted."""
    text = render_ddl(schema, descriptions=False)
    check_snapshot("ddl_compact.sql", text)
    assert text == render_ddl(schema, descriptions=False, layout="compact")
    assert len(text.splitlines()) == len(schema.tables)


def test_render_ddl_compact_keeps_pretty_tables_with_descriptions(schema: Schema) -> None:
    """BIRD descriptions are ``--`` comments after each column, which needs one column a line:
    described tables fall back to the pretty form, the others stay compact."""
    text = render_ddl(schema)
    pretty = render_ddl(schema, layout="pretty").split("\n\n")
    described = {"concert", "singer"}
    compacts = render_ddl(schema, descriptions=False).splitlines()
    for table, block, compact in zip(schema.tables, pretty, compacts, strict=True):
        if table.name in described:
            assert block in text and compact not in text
            assert "--" in block
        else:
            assert compact in text and block not in text
    assert 'CREATE TABLE "empty_log" ("id" INTEGER, "note" TEXT);' in text
    # Without descriptions nothing needs a comment: every table is compact.
    assert "--" not in render_ddl(schema, descriptions=False)


def test_unknown_ddl_layout_is_refused(schema: Schema) -> None:
    with pytest.raises(ValueError, match="layout"):
        render_ddl(schema, layout="fancy")
    with pytest.raises(ValueError, match="layout"):
        render_ddl_with_rows(schema, layout="fancy")


@pytest.mark.parametrize("layout", ["compact", "pretty"])
def test_render_ddl_is_valid_sqlite(schema: Schema, layout: str) -> None:
    """Quoting and comments must survive a real parser: the DDL recreates the same schema."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(render_ddl(schema, layout=layout))
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert sorted(names) == schema.table_names
    fks = conn.execute("PRAGMA foreign_key_list('singer in concert')").fetchall()
    assert {(r[2], r[3], r[4]) for r in fks} == {
        ("concert", "concert_id", "concert_id"),
        ("singer", "Singer_ID", "Singer_ID"),
    }
    conn.close()
    with_rows = sqlite3.connect(":memory:")
    # the CSV sits in comments
    with_rows.executescript(render_ddl_with_rows(schema, rows=5, layout=layout))
    with_rows.close()


def test_compact_ddl_recreates_tables_columns_and_keys(schema: Schema) -> None:
    """The compact layout, no description falling back to pretty, run through SQLite itself."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(render_ddl(schema, descriptions=False))
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert sorted(names) == schema.table_names
    for table in schema.tables:
        info = conn.execute(f"PRAGMA table_info({quote(table.name)})").fetchall()
        assert [(r[1], r[2]) for r in info] == [(c.name, c.type) for c in table.columns]
        pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
        assert pk == table.primary_key
    fks = conn.execute("PRAGMA foreign_key_list('singer in concert')").fetchall()
    assert {(r[2], r[3], r[4]) for r in fks} == {
        ("concert", "concert_id", "concert_id"),
        ("singer", "Singer_ID", "Singer_ID"),
    }
    conn.close()
    with_rows = sqlite3.connect(":memory:")
    with_rows.executescript(render_ddl_with_rows(schema, rows=5, descriptions=False))
    names = [r[0] for r in with_rows.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert sorted(names) == schema.table_names
    with_rows.close()


def test_render_ddl_with_rows_snapshot(schema: Schema) -> None:
    check_snapshot(
        "ddl_rows.sql", render_ddl_with_rows(schema, rows=3, include_pk=False, layout="pretty")
    )


def test_render_ddl_with_rows_compact_snapshot(schema: Schema) -> None:
    text = render_ddl_with_rows(schema, rows=3, include_pk=False, descriptions=False)
    check_snapshot("ddl_rows_compact.sql", text)
    assert "PRIMARY KEY" not in text and "FOREIGN KEY" in text


def test_render_pet_snapshots(schema: Schema) -> None:
    check_snapshot("pet.txt", render_pet(schema))
    check_snapshot("pet_ablated.txt", render_pet(schema, include_values=False, include_fks=False))
    check_snapshot(
        "pet_linked.txt", render_pet(schema, subset={"singer in concert": None, "singer": []})
    )


def test_render_compact_snapshot(schema: Schema) -> None:
    values = {("SINGER", "name"): ["Joe Sharp", "Joe"], ("singer", "Home Town"): ["O'Fallon"]}
    check_snapshot("compact.txt", render_compact(schema, values=values))
    assert render_compact(schema, subset={"concert": ["theme"]}) == "# concert(concert_id, theme)"


def test_render_columns_snapshot(schema: Schema) -> None:
    check_snapshot("columns.txt", render_columns(schema, examples=3))


def test_renderers_accept_a_subset_schema(schema: Schema) -> None:
    linked = schema.subset(tables=["concert"])
    assert render_ddl(schema, subset=linked) == render_ddl(linked)
    assert "singer" not in render_ddl(schema, subset={"concert": None})


# --- real benchmark databases -------------------------------------------------------------------------


def test_superhero_descriptions_render(data_root: Path) -> None:
    path = data_root / "bird" / "dev_databases" / "superhero" / "superhero.sqlite"
    if not path.is_file():
        pytest.skip("BIRD superhero database not available")
    with Database.open(path) as db:
        schema = introspect(db)
    full_name = schema.find_column("superhero", "full_name")
    assert full_name.description == "the full name of the superhero"
    ddl = render_ddl(schema)
    assert "full_name TEXT, -- the full name of the superhero" in ddl
    assert "FOREIGN KEY (gender_id) REFERENCES gender(id)" in ddl
    columns = render_columns(schema, subset={"superhero": ["superhero_name"]})
    assert columns.startswith(
        "superhero.id (INTEGER, primary key): the unique identifier of the superhero."
    )
    assert (
        "superhero.superhero_name (TEXT): the name of the superhero. Example values: '3-D Man'"
        in columns
    )
    assert len(schema.tables) == 10


#: SQLite's documented keywords (sqlite.org/lang_keywords.html); the three dialects' tokenizer
#: keywords are added from sqlglot below.
SQLITE_KEYWORDS = """abort action add after all alter always analyze and as asc attach
autoincrement before begin between by cascade case cast check collate column commit conflict
constraint create cross current current_date current_time current_timestamp database default
deferrable deferred delete desc detach distinct do drop each else end escape except exclude
exclusive exists explain fail filter first following for foreign from full generated glob group
groups having if ignore immediate in index indexed initially inner insert instead intersect into
is isnull join key last left like limit match materialized natural no not nothing notnull null
nulls of offset on or order others outer over partition plan pragma preceding primary query
raise range recursive references regexp reindex release rename replace restrict returning right
rollback row rows savepoint select set table temp temporary then ties to transaction trigger
unbounded union unique update using vacuum values view virtual when where window with
without""".split()


def _keywords() -> list[str]:
    from sqlglot.dialects.dialect import Dialect

    words = set(SQLITE_KEYWORDS)
    for dialect in ("sqlite", "duckdb", "postgres"):
        tokenizer = Dialect.get_or_raise(dialect).tokenizer_class
        words |= {k.lower() for k in tokenizer.KEYWORDS if k.isalpha()}
    return sorted(words)


def _sweep(run: Any, cases: bool = True) -> list[str]:
    """The keywords that ``ident`` writes so that the engine behind ``run`` cannot read them as
    a column of a table itself named by the keyword (both written by ``ident``); with
    ``cases``, each also in upper case and capitalised."""
    broken = []
    for i, word in enumerate(_keywords()):
        variants = (word, word.upper(), word.capitalize()) if cases else (word,)
        for j, name in enumerate(variants):
            table = name if j == 0 else f"t{i}_{j}"  # the keyword itself names a table once
            try:
                run(f"CREATE TABLE {quote(table)} ({quote(name)} INTEGER)")
                run(f"SELECT {ident(name)} FROM {ident(table)} WHERE {ident(name)} IS NULL")
            except Exception:  # noqa: BLE001 - the engine's own error type: the word broke it
                broken.append(name)
    return broken


def test_ident_writes_every_keyword_so_sqlite_and_duckdb_read_it() -> None:
    conn = sqlite3.connect(":memory:")
    assert _sweep(conn.execute) == []
    duckdb = pytest.importorskip("duckdb")
    assert _sweep(duckdb.connect().execute) == []


@pytest.mark.parametrize("dialect", ["sqlite", "duckdb", "postgres"])
def test_ident_writes_every_keyword_so_the_read_only_check_reads_it(dialect: str) -> None:
    """sqlglot reads every query before it runs: a name the prompt shows bare must parse there
    too (``if``, ``xor``, ``cube``, DuckDB's ``map`` did not), keywords with an underscore
    (``partitioned_by``) included."""
    from sqlglot.dialects.dialect import Dialect

    from sqlweave.db.policy import ensure_read_only

    tokenizer = Dialect.get_or_raise(dialect).tokenizer_class
    words = set(_keywords()) | {
        k.lower() for k in tokenizer.KEYWORDS if k.replace("_", "").isalpha()
    }
    broken = []
    for word in sorted(words):
        for name in (word, word.upper(), word.capitalize()):
            i = ident(name, dialect)
            try:
                ensure_read_only(f"SELECT {i} FROM {i} WHERE {i} = 1 GROUP BY {i}", dialect)
            except Exception:  # noqa: BLE001 - any refusal: the name broke the reading
                broken.append(name)
    assert broken == []


@pytest.mark.postgres
def test_ident_writes_every_keyword_so_postgres_reads_it(pg_engine: Any) -> None:
    with pg_engine.connect() as conn:
        conn.exec_driver_sql("BEGIN")
        try:

            def run(sql: str) -> None:
                conn.exec_driver_sql("SAVEPOINT s")
                try:
                    conn.exec_driver_sql(sql.replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
                except Exception:
                    conn.exec_driver_sql("ROLLBACK TO SAVEPOINT s")
                    raise
                conn.exec_driver_sql("RELEASE SAVEPOINT s")

            # lower case only: PostgreSQL folds a bare name to lower case, so "ABORT" bare is
            # abort whatever ident does; the layouts that show such names quote every one
            assert _sweep(run, cases=False) == []
        finally:
            conn.exec_driver_sql("ROLLBACK")


def test_spider_names_with_spaces_are_quoted(data_root: Path) -> None:
    path = data_root / "spider" / "database" / "perpetrator" / "perpetrator.sqlite"
    if not path.is_file():
        pytest.skip("Spider perpetrator database not available")
    with Database.open(path) as db:
        schema = introspect(db)
        assert '"Home Town"' in render_pet(schema)
        assert schema.find_column("people", "home town").samples
        ddl = render_ddl(schema)
    conn = sqlite3.connect(":memory:")
    conn.executescript(ddl)
    conn.close()


def test_a_full_text_table_is_introspected_and_queried(tmp_path: Path) -> None:
    """An FTS5 table declares its columns through SQLite's schema parser and reads PRAGMA
    data_version when it opens: introspection and a query by the model both work; a table
    whose name only starts with "sqlite" is no internal table and stays in the DDL."""
    path = tmp_path / "fts.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE VIRTUAL TABLE docs USING fts5(title, body);"
            "INSERT INTO docs VALUES ('a', 'hello world');"
            "CREATE TABLE sqlitedata (y INTEGER);"
        )
    db = Database.open(path)
    schema = introspect(db)
    assert {"docs", "sqlitedata"} <= set(schema.table_names)
    assert "CREATE TABLE sqlitedata" in native_ddl(db)
    assert db.execute("SELECT title FROM docs WHERE docs MATCH 'hello'").rows == (("a",),)
    from sqlweave.db.sqlite import _untrusted_authorizer

    # reading that one pragma, yes; setting it, or reading another, never
    pragma = sqlite3.SQLITE_PRAGMA
    assert _untrusted_authorizer(pragma, "data_version", None, "main", None) == sqlite3.SQLITE_OK
    assert _untrusted_authorizer(pragma, "data_version", "3", "main", None) == sqlite3.SQLITE_DENY
    assert _untrusted_authorizer(pragma, "user_version", None, "main", None) == sqlite3.SQLITE_DENY


def test_a_catalog_that_cannot_be_read_is_an_execution_error(tmp_path: Path) -> None:
    path = tmp_path / "nomodule.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE t (x INTEGER); PRAGMA writable_schema = ON;"
            "INSERT INTO sqlite_master VALUES "
            "('table', 'v', 'v', 0, 'CREATE VIRTUAL TABLE v USING nosuchmodule()');"
        )
    with pytest.raises(ExecutionError, match="cannot read the tables of nomodule"):
        introspect(Database.open(path))
