"""Schema filtering without an LM: ranking, join paths, values, the budget, a 1,000-table schema."""

from __future__ import annotations

from sqlweave.schema import Column, ForeignKey, Schema, Table
from sqlweave.schema_filter import SchemaIndex, filter_schema, words


def _table(name: str, *columns: str, pk: str = "id") -> Table:
    return Table(name=name, columns=[Column(pk), *(Column(c) for c in columns)], primary_key=[pk])


def _shop() -> Schema:
    tables = [
        _table("customer", "full_name", "city"),
        _table("orders", "customer_id", "product_id", "order_date"),
        _table("product", "title", "unit_price"),
        _table("employee", "salary", "hire_date"),
        _table("stadium", "capacity", "location"),
        _table("singer", "country", "age"),
    ]
    fks = [
        ForeignKey("orders", "customer_id", "customer", "id"),
        ForeignKey("orders", "product_id", "product", "id"),
    ]
    return Schema(db_id="shop", dialect="sqlite", tables=tables, foreign_keys=fks)


def test_words_split_snake_camel_and_merged_prefixes():
    assert words("concert_singer__Song_Name") == ["concert", "singer", "song", "name"]
    assert words("HireDate2") == ["hire", "date", "2"]


def test_the_table_a_question_names_ranks_first():
    kept = filter_schema(SchemaIndex(_shop()), "What is the average capacity of all stadiums?")
    assert kept.ranking[0] == "stadium"
    assert "singer" not in kept.tables or kept.scores["singer"] < kept.scores["stadium"]


def test_tables_that_join_two_kept_tables_come_along():
    # the question names customers and products; orders is the only way to join them
    kept = filter_schema(
        SchemaIndex(_shop()),
        "Which customers bought a product with a unit price over 10?",
        max_tables=2,
        min_share=0.0,
        neighbour_weight=0.0,
    )
    assert {"customer", "product", "orders"} <= set(kept.tables)
    assert {(fk.table, fk.ref_table) for fk in kept.schema.foreign_keys} == {
        ("orders", "customer"),
        ("orders", "product"),
    }


def test_a_table_joined_to_a_related_table_ranks_above_an_unjoined_one():
    index = SchemaIndex(_shop())
    question = "How many customers are there in each city?"
    alone = filter_schema(index, question, neighbour_weight=0.0, min_share=0.0)
    joined = filter_schema(index, question, neighbour_weight=0.5, min_share=0.0)
    assert alone.scores["orders"] < joined.scores["orders"]
    assert joined.scores["orders"] > joined.scores["stadium"]


def test_a_stored_value_the_question_names_pulls_its_table_in():
    index = SchemaIndex(_shop())
    question = "Which singer comes from Reykjavik?"
    plain = filter_schema(index, question, max_tables=3, min_share=0.0)
    assert plain.tables == ["singer"]  # nothing else has any evidence
    valued = filter_schema(
        index,
        question,
        mentioned=[("customer", "city", "Reykjavik")],
        max_tables=3,
        min_share=0.0,
    )
    assert {"singer", "customer"} <= set(valued.tables)
    assert valued.pinned == [("customer", "city")]
    # short or stopword values are everywhere in a big database: they weigh nothing
    noisy = filter_schema(index, question, mentioned=[("singer", "country", "All")], max_tables=1)
    assert noisy.pinned == []


def test_fit_drops_the_lowest_ranked_tables_but_keeps_the_best():
    index = SchemaIndex(_shop())
    question = "List customers, their orders and the product titles"
    whole = filter_schema(index, question, max_tables=6, min_share=0.0)
    assert len(whole.tables) >= 3
    small = filter_schema(
        index, question, max_tables=6, min_share=0.0, fit=lambda s: len(s.tables) <= 2
    )
    assert small.ranking == whole.ranking[: len(small.ranking)]
    assert len(small.tables) <= 2
    never = filter_schema(index, question, fit=lambda s: False)
    assert never.tables == [whole.ranking[0]]


def test_a_thousand_table_schema_is_cut_to_a_few_tables_that_hold_the_answer():
    topics = ["apple", "harbor", "violin", "glacier", "comet", "saddle", "lantern", "quartz"]
    tables = []
    for i in range(1000):
        topic = topics[i % len(topics)]
        tables.append(_table(f"db{i}__{topic}_log_{i}", f"{topic}_count", "note"))
    tables.append(_table("db_x__penguin_colony", "penguin_count", "island_name"))
    schema = Schema(db_id="big", dialect="sqlite", tables=tables)
    kept = filter_schema(SchemaIndex(schema), "How many penguins live on each island?")
    assert kept.ranking[0] == "db_x__penguin_colony"
    assert len(kept.tables) <= 6


def _two_applications() -> Schema:
    """A music application and a shop in one database: two FK components, look-alike words."""
    tables = [
        _table("concert", "concert_name", "stadium_id", "year"),
        _table("stadium", "name", "capacity"),
        _table("singer_in_concert", "concert_id", "singer_id"),
        _table("singer", "name", "country", "age"),
        _table("customer", "full_name", "city"),
        _table("orders", "customer_id", "order_date", "singer_name"),
    ]
    fks = [
        ForeignKey("concert", "stadium_id", "stadium", "id"),
        ForeignKey("singer_in_concert", "concert_id", "concert", "id"),
        ForeignKey("singer_in_concert", "singer_id", "singer", "id"),
        ForeignKey("orders", "customer_id", "customer", "id"),
    ]
    return Schema(db_id="two", dialect="sqlite", tables=tables, foreign_keys=fks)


MUSIC = {"concert", "stadium", "singer_in_concert", "singer"}


def test_a_dominant_component_is_shown_whole_and_alone():
    index = SchemaIndex(_two_applications())
    question = "Which concerts took place in the stadium with the largest capacity?"
    kept = filter_schema(index, question, max_tables=2)
    assert set(kept.tables) == MUSIC
    assert kept.ranking[0] in {"concert", "stadium"}
    # without the component rule only the two best tables are kept
    ranked = filter_schema(index, question, max_tables=2, whole_component=0)
    assert set(ranked.tables) == {"concert", "stadium"}


def test_no_component_dominates_the_ranking_stands():
    index = SchemaIndex(_two_applications())
    question = "Which customers ordered songs of singers from France?"
    ranked = filter_schema(index, question, min_share=0.0, component_share=1.01)
    assert {"customer", "singer"} <= set(ranked.tables)
    assert filter_schema(index, question, min_share=0.0).tables == ranked.tables


def test_a_component_too_big_or_over_budget_is_not_shown_whole():
    index = SchemaIndex(_two_applications())
    question = "Which concerts took place in the stadium with the largest capacity?"
    small = filter_schema(index, question, max_tables=2, whole_component=3)
    assert set(small.tables) == {"concert", "stadium"}
    tight = filter_schema(index, question, fit=lambda s: len(s.tables) <= 2)
    assert len(tight.tables) <= 2
