"""Each augmentation yields a valid query graph and changes only what it is meant to change."""

from __future__ import annotations

import torch
from test_gnn_graph import HashEncoder

from sqlweave.gnn.augment import (
    ESSENTIAL_KEYWORDS,
    KEYWORD_FAMILIES,
    Compose,
    DatabaseReplacement,
    FeatureMasking,
    JoinSimplification,
    KeywordReplacement,
    PredicateModification,
    RandomAugmentation,
    ValueReplacement,
    ValueVocabulary,
    default_augmentations,
)
from sqlweave.gnn.graph import (
    COLUMN,
    KEYWORD,
    MASK_TEXT,
    MEMBERSHIP,
    NUM_NODE_TYPES,
    ROOT,
    STRUCTURAL,
    TABLE,
    VALUE,
    Catalog,
    GraphBuilder,
)

PETS = (
    "SELECT T1.fname FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid = T2.stuid "
    "JOIN pets AS T3 ON T3.petid = T2.petid WHERE T3.pettype = 'cat' AND T1.age > 20 "
    "ORDER BY T1.age DESC"
)
CATALOG = {
    "pets_1": {
        "student": {"stuid": "number", "fname": "text", "age": "number"},
        "has_pet": {"stuid": "number", "petid": "number"},
        "pets": {"petid": "number", "pettype": "text", "weight": "number"},
    },
    "concert_singer": {
        "singer": {"singer_id": "number", "name": "text", "age": "number", "country": "text"},
        "singer_in_concert": {"singer_id": "number", "concert_id": "number"},
        "concert": {"concert_id": "number", "theme": "text", "year": "number"},
        "stadium": {"stadium_id": "number", "location": "text"},
    },
    "tiny": {"only": {"a": "number"}},
}


def make_builder() -> GraphBuilder:
    catalog = Catalog()
    for db, tables in CATALOG.items():
        catalog.add(db, tables)
    return GraphBuilder(encoder=HashEncoder(), catalog=catalog)


def build(builder: GraphBuilder, sql: str = PETS, db_id: str = "pets_1"):
    return builder.build(sql, db_id=db_id)


def assert_valid(data, builder: GraphBuilder) -> None:
    """Consistent sizes, in-range edges, one root, everything reachable, features match texts."""
    n = data.num_nodes
    assert (
        data.x.size(0) == len(data.node_text) == len(data.node_info) == data.node_type.numel() == n
    )
    assert data.edge_index.size(1) == data.edge_type.numel()
    assert int(data.edge_index.max()) < n and int(data.edge_index.min()) >= 0
    assert data.node_type[0] == ROOT and int((data.node_type == ROOT).sum()) == 1
    data.validate(raise_on_error=True)
    src, dst = data.edge_index.tolist()
    kids: dict[int, list[int]] = {}
    for s, d, t in zip(src, dst, data.edge_type.tolist(), strict=True):
        if t == STRUCTURAL:
            kids.setdefault(s, []).append(d)
        else:  # membership edges go table -> column
            assert data.node_type[s] == TABLE and data.node_type[d] == COLUMN
    seen, stack = {0}, [0]
    while stack:
        for c in kids.get(stack.pop(), []):
            if c not in seen:
                seen.add(c)
                stack.append(c)
    tables_of_seen = {
        s
        for s, d, t in zip(src, dst, data.edge_type.tolist(), strict=True)
        if t == MEMBERSHIP and d in seen
    }
    assert seen | tables_of_seen == set(range(n)), "unreachable nodes left behind"
    expected = builder.featurize(data.node_text, data.node_type.tolist())
    assert torch.allclose(data.x, expected), "features do not match node texts"


def changed_nodes(a, b) -> list[int]:
    assert a.num_nodes == b.num_nodes
    return [i for i in range(a.num_nodes) if a.node_text[i] != b.node_text[i]]


def same_structure(a, b) -> bool:
    return (
        torch.equal(a.edge_index, b.edge_index)
        and torch.equal(a.edge_type, b.edge_type)
        and torch.equal(a.node_type, b.node_type)
        and a.node_info == b.node_info
    )


def test_feature_masking_hides_only_non_essential_nodes():
    builder = make_builder()
    g = build(builder)
    out = FeatureMasking(p=0.3, seed=1)(g)
    assert_valid(out, builder)
    assert same_structure(g, out)
    changed = changed_nodes(g, out)
    assert changed and all(out.node_text[i] == MASK_TEXT for i in changed)
    assert torch.all(out.x[changed, NUM_NODE_TYPES:] == 0)
    keep = [i for i in range(g.num_nodes) if i not in changed]
    assert torch.equal(out.x[keep], g.x[keep])
    everything = FeatureMasking(p=1.0, seed=0)(g)
    for text, ty in zip(everything.node_text, g.node_type.tolist(), strict=True):
        if ty == ROOT:
            assert text == "ROOT"
    kept = {t for t in everything.node_text if t != MASK_TEXT}
    assert kept == {"ROOT"} | {t for t in g.node_text if t in ESSENTIAL_KEYWORDS}
    assert g.node_text.count(MASK_TEXT) == 0  # the input is not modified in place


def test_keyword_replacement_swaps_within_family():
    builder = make_builder()
    g = build(builder)
    family = {kw: fam for fam in KEYWORD_FAMILIES for kw in fam}
    for seed in range(5):
        out = KeywordReplacement(builder, p=0.5, seed=seed)(g)
        assert_valid(out, builder)
        assert same_structure(g, out)
        changed = changed_nodes(g, out)
        assert changed
        for i in changed:
            assert g.node_type[i] == KEYWORD
            assert out.node_text[i] in family[g.node_text[i]] and out.node_text[i] != g.node_text[i]
    plain = build(builder, "SELECT fname FROM student")
    assert not KeywordReplacement(builder).applicable(plain)


def test_value_replacement_keeps_kind_and_like_shape():
    builder = make_builder()
    g = build(
        builder, "SELECT name FROM singer WHERE country LIKE '%USA%' AND age > 30", "concert_singer"
    )
    vocab = ValueVocabulary([build(builder, "SELECT a FROM only WHERE a = 7 OR a = 'x'", "tiny")])
    out = ValueReplacement(builder, vocab, seed=3)(g)
    assert_valid(out, builder)
    assert same_structure(g, out)
    changed = changed_nodes(g, out)
    assert sorted(changed) == [i for i, t in enumerate(g.node_type.tolist()) if t == VALUE]
    new = {g.node_text[i]: out.node_text[i] for i in changed}
    assert new["30"] == "7"  # drawn from the vocabulary, same kind
    like = new["%USA%"]
    assert like.startswith("%") and like.endswith("%") and like != "%USA%"


def test_database_replacement_maps_names_into_another_database():
    builder = make_builder()
    g = build(builder)
    out = DatabaseReplacement(builder, builder.catalog, seed=0)(g)
    assert_valid(out, builder)
    assert same_structure(g, out)
    assert out.db_id == "concert_singer"  # the only other database with >= 3 tables
    target = CATALOG["concert_singer"]
    changed = set(changed_nodes(g, out))
    for i, ty in enumerate(g.node_type.tolist()):
        if ty == TABLE:
            assert i in changed and out.node_text[i] in target
        elif ty == COLUMN:
            table, _, column = out.node_text[i].partition(".")
            assert column in target[table]
            # same kind preferred: number stays number, text stays text
            old_t, _, old_c = g.node_text[i].partition(".")
            assert target[table][column] == CATALOG["pets_1"][old_t][old_c]
        else:
            assert i not in changed
    # the table -> column membership still holds under the new names
    src, dst = out.edge_index.tolist()
    for s, d, t in zip(src, dst, out.edge_type.tolist(), strict=True):
        if t == MEMBERSHIP:
            assert out.node_text[d].startswith(out.node_text[s] + ".")


def test_predicate_modification_drops_where_but_keeps_shared_names():
    builder = make_builder()
    g = build(builder)
    out = PredicateModification(p_simplify=0.0, seed=0)(g)
    assert_valid(out, builder)
    assert "WHERE" not in out.node_text and "AND" not in out.node_text
    assert "cat" not in out.node_text and "pets.pettype" not in out.node_text
    # student.age is still used by ORDER BY, pets by its JOIN: both stay
    assert "student.age" in out.node_text and "pets" in out.node_text
    removed = set(g.node_text) - set(out.node_text)
    assert removed == {"WHERE", "AND", ">", "pets.pettype", "cat", "20"}


def test_predicate_modification_simplifies_a_conjunction():
    builder = make_builder()
    g = build(builder)
    out = PredicateModification(p_simplify=1.0, seed=0)(g)
    assert_valid(out, builder)
    assert "WHERE" in out.node_text and "AND" not in out.node_text
    where = out.node_text.index("WHERE")
    src, dst = out.edge_index.tolist()
    kids = [out.node_text[d] for s, d in zip(src, dst, strict=True) if s == where]
    assert len(kids) == 1 and kids[0] in ("=", ">")
    assert out.num_nodes in (g.num_nodes - 3, g.num_nodes - 4)  # AND + one comparison (+col)


def test_join_simplification_drops_one_join():
    builder = make_builder()
    g = build(builder)
    join = JoinSimplification(seed=0)
    assert join.applicable(g)
    out = join(g)
    assert_valid(out, builder)
    assert g.node_text.count("JOIN") == 2 and out.node_text.count("JOIN") == 1
    assert out.node_text.count("SELECT") == 1 and "WHERE" in out.node_text
    one = build(
        builder, "SELECT T1.fname FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid = T2.stuid"
    )
    assert not join.applicable(one)
    assert join(one).node_text == one.node_text


def test_compose_and_random_choice_are_seeded():
    builder = make_builder()
    g = build(builder)
    chain = Compose([JoinSimplification(seed=0), FeatureMasking(p=0.2, seed=0)])
    out = chain(g)
    assert_valid(out, builder)
    assert out.node_text.count("JOIN") == 1 and MASK_TEXT in out.node_text
    a = [default_augmentations(builder, builder.catalog, seed=7)(g).node_text for _ in range(1)]
    b = [default_augmentations(builder, builder.catalog, seed=7)(g).node_text for _ in range(1)]
    assert a == b
    pick = RandomAugmentation([JoinSimplification(), KeywordReplacement(builder)], seed=0)
    simple = build(builder, "SELECT fname FROM student")
    assert pick(simple).node_text == simple.node_text  # nothing applicable: unchanged
    views = {tuple(pick(g).node_text) for _ in range(10)}
    assert len(views) > 1
    for view in (pick(g) for _ in range(5)):
        assert_valid(view, builder)
