"""SQL structure: skeletons, keywords, pq-grams and question tokens on fixture SQL."""

from __future__ import annotations

from collections import Counter

import pytest

from sqlweave.sqlstruct import (
    BagIndex,
    LabelTree,
    jaccard,
    pq_gram_distance,
    pq_gram_profile,
    pq_gram_similarity,
    profile_similarity,
    question_tokens,
    skeleton,
    skeleton_similarity,
    sql_keywords,
    structure_tree,
    token_ratio,
    tree_pq_grams,
)

# Same structure, different tables, columns, aliases and values.
SAME_A = (
    "SELECT T1.name, count(*) FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id "
    'WHERE T1.country = "France" AND T1.age > 20 GROUP BY T1.name ORDER BY count(*) DESC LIMIT 3'
)
SAME_B = (
    "select b.title, COUNT(*) from book b join author a on b.author_id = a.id "
    "where a.nation = 'UK' and b.pages > 350 group by b.title order by count(*) desc limit 10"
)
NESTED = "SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)"
SET_OP = "SELECT name FROM singer WHERE age < 30 INTERSECT SELECT name FROM singer WHERE age > 20"
SIMPLE = "SELECT name FROM singer"
SIMPLE_ORDERED = "SELECT name FROM singer ORDER BY age"
GARBAGE = "SELEC name FRM singer WHERE ((( 'unterminated"


def test_skeleton_abstracts_names_aliases_and_values() -> None:
    assert skeleton("SELECT name FROM singer WHERE age = 5 ORDER BY age DESC LIMIT 1") == (
        "select _ from _ where _ = _ order by _ desc limit _"
    )
    assert skeleton(SAME_A) == skeleton(SAME_B)
    # An alias on a column or a table is naming, not structure.
    assert skeleton("SELECT count(*) AS n FROM t AS x") == skeleton("SELECT count(*) FROM t")
    # BIRD's INNER JOIN is Spider's JOIN; an outer join is not.
    inner = "SELECT a FROM t INNER JOIN u ON t.x = u.x"
    assert skeleton(inner) == skeleton("SELECT a FROM t JOIN u ON t.x = u.x")
    assert pq_gram_distance(inner, "SELECT a FROM t JOIN u ON t.x = u.x") == 0.0
    assert skeleton(inner) != skeleton("SELECT a FROM t LEFT JOIN u ON t.x = u.x")
    assert pq_gram_distance(inner, "SELECT a FROM t LEFT JOIN u ON t.x = u.x") > 0.0


def test_spider_double_quoted_values_are_strings() -> None:
    # SQLite's grammar reads "France" as an identifier; Spider means a string.
    double = structure_tree('SELECT a FROM t WHERE c = "France"')
    single = structure_tree("SELECT a FROM t WHERE c = 'France'")
    assert double == single
    assert "literal" in repr(double)
    # ...but a double-quoted name after a dot or FROM stays a name.
    assert skeleton('SELECT T1."name" FROM "singer" AS T1') == "select _ from _"


def test_skeleton_similarity() -> None:
    assert skeleton_similarity(SAME_A, SAME_B) == 1.0
    assert skeleton_similarity(SIMPLE, NESTED) < 1.0
    near = skeleton_similarity(SIMPLE, SIMPLE_ORDERED)
    far = skeleton_similarity(SIMPLE, SET_OP)
    assert 0.0 < far < near < 1.0
    assert skeleton_similarity(SIMPLE, NESTED) == skeleton_similarity(NESTED, SIMPLE)


def test_token_ratio_is_symmetric() -> None:
    pairs = [
        (list("abcxd"), list("axbcd")),
        (["select", "_", "from", "_"], ["select", "count", "(", "*", ")", "from", "_"]),
    ]
    for a, b in pairs:
        assert token_ratio(a, b) == token_ratio(b, a)


def test_unparseable_sql_falls_back_to_tokens() -> None:
    text = skeleton(GARBAGE)
    assert "where ( ( (" in text
    assert "singer" not in text and "unterminated" not in text
    assert 0.0 <= skeleton_similarity(GARBAGE, SIMPLE) < 1.0
    tree = structure_tree(GARBAGE)
    assert tree.label == "unparsed" and tree.children
    assert 0.0 < pq_gram_distance(GARBAGE, SIMPLE) <= 1.0
    assert pq_gram_distance(GARBAGE, GARBAGE) == 0.0
    assert isinstance(sql_keywords(GARBAGE), set)
    assert skeleton("") == ""
    assert pq_gram_distance("", "") == 0.0


def test_sql_keywords() -> None:
    assert sql_keywords(SAME_A) >= {
        "select",
        "join",
        "where",
        "and",
        "=",
        ">",
        "group by",
        "order by",
        "count",
        "desc",
        "limit",
    }
    assert "nested-select" not in sql_keywords(SAME_A)
    assert {"nested-select", "avg", ">"} <= sql_keywords(NESTED)
    assert "intersect" in sql_keywords(SET_OP)
    assert "nested-select" not in sql_keywords(SET_OP)
    kws = sql_keywords(
        "SELECT DISTINCT a FROM t LEFT JOIN u ON t.x = u.x "
        "WHERE b NOT IN (SELECT b FROM v) AND c LIKE '%x%' AND d BETWEEN 1 AND 2"
    )
    assert {"distinct", "join", "left join", "not", "in", "like", "between", "nested-select"} <= kws
    assert sql_keywords("SELECT max(a), min(b), sum(c) FROM t") >= {"max", "min", "sum"}
    # Unparseable (unbalanced parenthesis): keywords come from the token stream.
    assert {"select", "group by", "nested-select"} <= sql_keywords(
        "SELECT a FROM (select b from t group by b"
    )
    assert "nested-select" not in sql_keywords("SELECT a FROM t UNION SELECT b FROM (u")


def test_pq_grams_of_a_hand_built_tree() -> None:
    # a(b, c) with p=2, q=3: stem (*, a) with 2 + 3 - 1 = 4 bases, plus one gram per leaf.
    tree = LabelTree("a", (LabelTree("b"), LabelTree("c")))
    expected = Counter(
        {
            ("*", "a", "*", "*", "b"): 1,
            ("*", "a", "*", "b", "c"): 1,
            ("*", "a", "b", "c", "*"): 1,
            ("*", "a", "c", "*", "*"): 1,
            ("a", "b", "*", "*", "*"): 1,
            ("a", "c", "*", "*", "*"): 1,
        }
    )
    assert tree_pq_grams(tree, 2, 3) == expected
    # A deeper tree: b's leaf grams carry a in their stem.
    deep = LabelTree("a", (LabelTree("b", (LabelTree("d"),)),))
    grams = tree_pq_grams(deep, 2, 2)
    assert grams[("b", "d", "*", "*")] == 1
    assert grams[("a", "b", "*", "d")] == 1 and grams[("a", "b", "d", "*")] == 1
    assert sum(grams.values()) == 2 + 2 + 1
    with pytest.raises(ValueError):
        tree_pq_grams(tree, 0, 3)


def test_pq_gram_similarity_on_sql() -> None:
    assert pq_gram_similarity(SAME_A, SAME_B) == 1.0
    assert pq_gram_distance(SAME_A, SAME_B) == 0.0
    assert pq_gram_profile(SAME_A) == pq_gram_profile(SAME_B)
    for a, b in [(SIMPLE, NESTED), (SAME_A, SET_OP), (SIMPLE, SIMPLE_ORDERED)]:
        d = pq_gram_distance(a, b)
        assert 0.0 < d <= 1.0
        assert d == pq_gram_distance(b, a)
    # An added ORDER BY is a smaller change than a whole set operation.
    assert pq_gram_distance(SIMPLE, SIMPLE_ORDERED) < pq_gram_distance(SIMPLE, SET_OP)
    # p and q change the profile, not the identity.
    assert pq_gram_distance(SAME_A, SAME_B, p=1, q=2) == 0.0
    assert sum(pq_gram_profile(NESTED, 1, 2).values()) != sum(pq_gram_profile(NESTED).values())


def test_pq_gram_distance_matches_definition() -> None:
    p1, p2 = pq_gram_profile(SIMPLE), pq_gram_profile(NESTED)
    inter = sum((p1 & p2).values())
    expected = 1 - 2 * inter / (sum(p1.values()) + sum(p2.values()))
    assert pq_gram_distance(SIMPLE, NESTED) == pytest.approx(expected)
    assert profile_similarity(p1, p2) == pytest.approx(1 - expected)


def test_bag_index_matches_pairwise_functions() -> None:
    pool = [SAME_A, SAME_B, NESTED, SET_OP, SIMPLE, SIMPLE_ORDERED, GARBAGE]
    index = BagIndex([pq_gram_profile(s) for s in pool])
    for query in pool:
        dice = index.dice(pq_gram_profile(query))
        for i, s in enumerate(pool):
            assert dice[i] == pq_gram_similarity(query, s)
    sets = [question_tokens(q) for q in ("How many singers?", "Names of singers.", "")]
    jindex = BagIndex([dict.fromkeys(s, 1) for s in sets])
    query = question_tokens("How many singers are from France?")
    got = jindex.jaccard(dict.fromkeys(query, 1))
    assert got.tolist() == [jaccard(query, s) for s in sets]


def test_question_tokens_and_jaccard() -> None:
    tokens = question_tokens("What are the names of the singers from France?")
    assert tokens == {"what", "names", "singers", "france"}
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
    assert jaccard(set(), set()) == 1.0
    assert jaccard({"a"}, set()) == 0.0
