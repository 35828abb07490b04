"""SQL → graph: node/edge counts on known queries, merging, clause links, features, caching."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from sqlweave.gnn.graph import (
    COLUMN,
    KEYWORD,
    MEMBERSHIP,
    NUM_NODE_TYPES,
    ROOT,
    TABLE,
    VALUE,
    Catalog,
    GraphBuilder,
    GraphError,
    node_counts,
    parse_graph,
)


class HashEncoder:
    """Deterministic stand-in for the sentence encoder; counts the texts it is asked for."""

    dim = 16

    def __init__(self) -> None:
        self.calls: list[str] = []

    def encode(self, texts, progress=False):
        self.calls.extend(texts)
        rows = []
        for t in texts:
            seed = int(hashlib.sha1(t.encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.stack(rows) if rows else np.zeros((0, self.dim), np.float32)


def _edges(g, etype=None):
    return {(g.texts[s], g.texts[d]) for s, d, t in g.edges if etype is None or t == etype}


def test_simple_query_counts():
    g = parse_graph("SELECT count(*) FROM head WHERE age  >  56")
    assert g.texts == ["ROOT", "SELECT", "COUNT", "*", "head", "WHERE", ">", "head.age", "56"]
    assert [g.types.count(t) for t in range(NUM_NODE_TYPES)] == [1, 4, 1, 2, 1]
    assert len(g.edges) == 9
    assert ("head", "head.age") in _edges(g, MEMBERSHIP)
    assert {(">", "head.age"), (">", "56"), ("SELECT", "head"), ("ROOT", "SELECT")} <= _edges(g)
    assert g.infos[8] == "int"


def test_set_operation_with_joins_merges_names():
    sql = (
        "SELECT stuid FROM student EXCEPT SELECT T1.stuid FROM student AS T1 "
        "JOIN has_pet AS T2 ON T1.stuid = T2.stuid JOIN pets AS T3 ON T3.petid = T2.petid "
        "WHERE T3.pettype = 'cat'"
    )
    g = parse_graph(sql)
    assert len(g.texts) == 19 and len(g.edges) == 26
    assert [g.types.count(t) for t in range(NUM_NODE_TYPES)] == [1, 9, 3, 5, 1]
    # aliases resolve to tables, and the same column is one node wherever it appears
    assert g.texts.count("student.stuid") == 1 and g.texts.count("student") == 1
    stuid = g.texts.index("student.stuid")
    parents = {g.texts[s] for s, d, t in g.edges if d == stuid}
    assert parents == {"SELECT", "=", "student"}
    assert g.texts[1] == "EXCEPT" and g.texts.count("JOIN") == 2
    assert ("JOIN", "pets") in _edges(g) and ("=", "cat") in _edges(g)


def test_group_by_and_having_hang_from_their_select():
    sql = (
        "SELECT name FROM t WHERE id IN (SELECT tid FROM u GROUP BY tid HAVING count(*) > 2) "
        "ORDER BY name DESC LIMIT 1"
    )
    g = parse_graph(sql)
    selects = [i for i, t in enumerate(g.texts) if t == "SELECT"]
    inner = selects[1]
    kids = {g.texts[d] for s, d, _ in g.edges if s == inner}
    assert {"GROUP BY", "HAVING"} <= kids
    outer_kids = {g.texts[d] for s, d, _ in g.edges if s == selects[0]}
    assert {"WHERE", "ORDER BY", "LIMIT"} <= outer_kids and "HAVING" not in outer_kids
    assert ("IN", "SELECT") in _edges(g) and ("ORDER BY", "DESC") in _edges(g)


def test_catalog_resolves_unqualified_columns_in_joins():
    sql = "SELECT name FROM singer JOIN concert ON singer.id = concert.sid WHERE year = 2014"
    bare = parse_graph(sql)
    assert "name" in bare.texts and "year" in bare.texts  # ambiguous without a schema
    tables = {
        "singer": {"id": "number", "name": "text"},
        "concert": {"sid": "number", "year": "number"},
    }
    g = parse_graph(sql, catalog_tables=tables)
    assert "singer.name" in g.texts and "concert.year" in g.texts
    assert ("concert", "concert.year") in _edges(g, MEMBERSHIP)


def test_values_keep_kind_and_like_pattern():
    g = parse_graph("SELECT a FROM t WHERE b LIKE '%USA%' AND c = 2.5 AND d = 'x' AND e IS NULL")
    vals = {g.texts[i]: g.infos[i] for i, t in enumerate(g.types) if t == VALUE}
    assert vals == {"%USA%": "string", "2.5": "float", "x": "string", "NULL": "null"}


def test_unparseable_sql_raises_graph_error():
    with pytest.raises(GraphError):
        parse_graph("SELECT FROM WHERE (((")


def test_builder_features_and_text_cache():
    enc = HashEncoder()
    builder = GraphBuilder(encoder=enc)
    d = builder.build("SELECT max(age) FROM head WHERE age > 56", db_id="x")
    assert d.x.shape == (d.num_nodes, NUM_NODE_TYPES + HashEncoder.dim)
    assert torch.equal(d.x[:, :NUM_NODE_TYPES].argmax(1), d.node_type)
    # merged node: head.age appears twice in the SQL but once in the graph
    assert d.node_text.count("head.age") == 1
    assert node_counts(d) == {"root": 1, "keyword": 4, "table": 1, "column": 1, "value": 1}
    d.validate(raise_on_error=True)
    before = len(enc.calls)
    builder.build("SELECT min(age) FROM head WHERE age > 56")
    assert enc.calls[before:] == ["MIN"]  # only the new text is embedded
    same = [i for i, t in enumerate(d.node_text) if t == "head"]
    assert torch.allclose(d.x[same[0], NUM_NODE_TYPES:], torch.from_numpy(enc.encode(["head"])[0]))


def test_build_many_skips_unparseable_and_batches_texts():
    enc = HashEncoder()
    builder = GraphBuilder(encoder=enc)
    out = builder.build_many([("SELECT a FROM t", "db"), ("SELEC nonsense ((", "db")])
    assert out[1] is None and out[0] is not None
    assert out[0].db_id == "db" and out[0].sql == "SELECT a FROM t"
    assert len(enc.calls) == len(set(enc.calls))  # each text embedded once


def test_real_pool_graphs(spider_root):
    from sqlweave.data import load_spider

    pool = load_spider("train", root=spider_root.parent)[:40]
    builder = GraphBuilder(encoder=HashEncoder(), catalog=Catalog.from_examples(pool))
    graphs = builder.build_pool(pool)
    assert all(g is not None for g in graphs)
    for g in graphs:
        assert g.node_type[0] == ROOT and int((g.node_type == ROOT).sum()) == 1
        assert int((g.node_type == KEYWORD).sum()) >= 1
        assert int(g.edge_index.max()) < g.num_nodes
    # with the catalog every column of a single-table query belongs to a table
    first = graphs[0]  # SELECT count(*) FROM head WHERE age > 56
    cols = [
        t for t, ty in zip(first.node_text, first.node_type.tolist(), strict=True) if ty == COLUMN
    ]
    assert "head.age" in cols
    assert any(ty == TABLE for ty in first.node_type.tolist())
