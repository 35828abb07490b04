"""Schema linking against real Spider schemas: LM names matched to the schema, tables and columns
read back from real dev SQL, unions, and pruned schemas that can still join."""

from __future__ import annotations

import json
import logging

import dspy
import pytest
import sqlglot
from dspy.utils import DummyLM
from sqlglot import exp

from sqlweave.programs.stages.linking import (
    BidirectionalLinker,
    ForwardLinker,
    LinkedSchema,
    columns_in_sql,
    columns_in_text,
    match_names,
    parse_link_output,
    tables_in_sql,
    union,
)
from sqlweave.schema import Schema, introspect

# A real Spider dev query on concert_singer (three-way join through the link table).
JOIN_SQL = (
    "SELECT T2.name FROM singer_in_concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id "
    "JOIN concert AS T3 ON T1.concert_id = T3.concert_id WHERE T3.year = 2014"
)


@pytest.fixture()
def schema(spider_db) -> Schema:
    return introspect(spider_db("concert_singer"))


def test_match_names_fixes_case_and_spelling_and_drops_unknowns(schema: Schema) -> None:
    linked = match_names(
        ["singer.nmae", "CONCERT.year", "`stadium`.`Capacity`", "bogus.nonsense", "qwerty"],
        schema,
    )
    assert linked.columns == {("singer", "Name"), ("concert", "Year"), ("stadium", "Capacity")}
    assert linked.tables == set()


def test_bare_names_link_every_table_with_that_column_or_a_whole_table(schema: Schema) -> None:
    linked = match_names(["singer_id", "stadium"], schema)
    assert linked.columns == {("singer", "Singer_ID"), ("singer_in_concert", "Singer_ID")}
    assert linked.tables == {"stadium"}
    # Without fuzzy matching a misspelling is simply dropped.
    assert not match_names(["singer.nmae"], schema, fuzzy=False)


def test_parse_link_output_from_prose_keeps_only_exact_names(schema: Schema, caplog) -> None:
    linked = parse_link_output("You need singer.Name and the Age column, thanks", schema)
    assert linked.columns == {("singer", "Name"), ("singer", "Age")}
    with caplog.at_level(logging.WARNING, logger="sqlweave.programs.stages.linking"):
        assert not parse_link_output("I cannot help with that.", schema)
    assert "no schema names" in caplog.text


def test_forward_linker_matches_lm_list_to_schema(schema: Schema) -> None:
    answer = json.dumps(["singer.nmae", "Concert.Year", "made_up.column"])
    lm = DummyLM([{"columns": answer}])
    with dspy.context(lm=lm):
        pred = ForwardLinker()(question="Names of singers in 2014 concerts?", schema=schema)
    assert pred.linked.columns == {("singer", "Name"), ("concert", "Year")}
    prompt = lm.history[-1]["messages"][-1]["content"]
    assert "CREATE TABLE" in prompt and "sqlite" in prompt


def test_forward_linker_survives_garbage(schema: Schema, caplog) -> None:
    # Dict mode answers every call the same (the JSON-adapter fallback makes a second call).
    lm = DummyLM({"How many": {"columns": "no idea, sorry"}})
    with caplog.at_level(logging.WARNING), dspy.context(lm=lm):
        pred = ForwardLinker()(question="How many singers?", schema=schema)
    assert not pred.linked
    assert pred.linked.subset(schema) is schema  # empty link -> full schema, not nothing
    assert "no schema names" in caplog.text


def test_tables_in_real_spider_sql(schema: Schema) -> None:
    assert tables_in_sql(JOIN_SQL, schema) == {"singer", "concert", "singer_in_concert"}
    assert tables_in_sql("SELECT count(*) FROM SINGER", schema) == {"singer"}
    # CTE names are not tables; unknown tables are dropped.
    sql = "WITH s AS (SELECT * FROM stadium) SELECT * FROM s JOIN ghost ON 1"
    assert tables_in_sql(sql, schema) == {"stadium"}
    # Unparsable SQL still yields the tables named in it.
    assert tables_in_sql("SELECT name FROM singer WHERE (", schema) == {"singer"}


def test_backward_links_every_column_named_in_the_sql(schema: Schema) -> None:
    linked = columns_in_sql(JOIN_SQL, schema)
    assert ("singer", "Name") in linked.columns and ("stadium", "Name") in linked.columns
    assert ("concert", "Year") in linked.columns
    assert ("singer_in_concert", "concert_ID") in linked.columns
    assert ("singer", "Age") not in linked.columns  # not in the text
    assert ("concert", "Theme") not in linked.columns
    assert not linked.tables  # columns only
    # Whole words only: "name" inside "concert_name" alone does not link the Name columns.
    only = columns_in_sql("SELECT concert_name FROM concert", schema)
    assert only.columns == {("concert", "concert_Name")}


def test_backward_linking_recall_on_spider_dev(spider_root, spider_db) -> None:
    # Linking a query backward must keep everything that query needs: its tables and columns.
    dev = json.loads((spider_root / "dev.json").read_text())[:80]
    for item in dev:
        sch = introspect(spider_db(item["db_id"]))
        pruned = columns_in_sql(item["query"], sch).subset(sch)
        kept_tables = {t.name.lower() for t in pruned.tables}
        kept_columns = {c.name.lower() for t in pruned.tables for c in t.columns}
        tree = sqlglot.parse_one(item["query"], read="sqlite")
        for table in tree.find_all(exp.Table):
            assert table.name.lower() in kept_tables, (table.name, item["query"])
        for column in tree.find_all(exp.Column):
            if column.name != "*":
                assert column.name.lower() in kept_columns, (column.name, item["query"])
        assert len(pruned.tables) <= len(sch.tables)


def test_evidence_columns(bird_db) -> None:
    sch = introspect(bird_db("superhero"))
    linked = columns_in_text("full name refers to full_name; tallest refers to MAX(height_cm)", sch)
    assert ("superhero", "full_name") in linked.columns
    assert ("superhero", "height_cm") in linked.columns
    assert not columns_in_text("", sch)


def test_union_and_subset_keep_join_keys(schema: Schema) -> None:
    a = LinkedSchema(columns={("singer", "Name")})
    b = LinkedSchema(columns={("concert", "Year")})
    c = LinkedSchema.from_tables(["stadium"])
    both = union(a, None, b, c)
    assert both.columns == {("singer", "Name"), ("concert", "Year")} and both.tables == {"stadium"}
    pruned = both.subset(schema)
    cols = {t.name: set(t.column_names) for t in pruned.tables}
    assert cols["singer"] == {"Singer_ID", "Name"}  # primary key kept
    assert cols["concert"] == {"concert_ID", "Year", "Stadium_ID"}  # FK to stadium kept
    assert len(cols["stadium"]) == 7  # whole table
    # The link table between singer and concert comes back with its keys.
    assert cols["singer_in_concert"] == {"concert_ID", "Singer_ID"}
    assert len(pruned.foreign_keys) == 3
    no_bridge = both.subset(schema, bridges=False)
    assert "singer_in_concert" not in {t.name for t in no_bridge.tables}


def test_bidirectional_switches(schema: Schema) -> None:
    draft = "SELECT avg(age) FROM singer"
    lm = DummyLM([{"columns": '["stadium.Capacity"]'}] * 2)
    with dspy.context(lm=lm):
        full = BidirectionalLinker()(question="Average age?", schema=schema, sql=draft)
        back = BidirectionalLinker(use_forward=False)(question="q", schema=schema, sql=draft)
        fwd = BidirectionalLinker(use_backward=False)(question="q", schema=schema, sql=draft)
    assert full.linked.columns == {("stadium", "Capacity"), ("singer", "Age")}
    assert back.linked.columns == {("singer", "Age")} and back.forward is None
    assert fwd.linked.columns == {("stadium", "Capacity")} and fwd.backward is None
    assert len(lm.history) == 2  # the backward-only linker made no call
    # A forward link computed earlier is reused without another call.
    again = BidirectionalLinker()(
        question="q", schema=schema, sql=draft, forward_linked=full.forward
    )
    assert again.linked == full.linked and len(lm.history) == 2
    assert {t.name for t in full.schema.tables} == {"singer", "stadium"}
