"""Demo retrievers on a pool of real Spider train examples (300, stratified by database)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import dspy
import numpy as np
import pytest
import sqlglot
from dspy.utils import DummyLM
from sqlglot import exp

from sqlweave.data import eval_slice, load_spider
from sqlweave.programs.stages.retrieval import (
    MASK,
    RETRIEVER_NAMES,
    UNK,
    DemoRetriever,
    JaccardRetriever,
    MaskedQuestionRetriever,
    PQGramRetriever,
    QuestionRetriever,
    RandomRetriever,
    SkeletonRetriever,
    _schema_names_of,
    as_demos,
    make_retriever,
    mask_question,
    schema_phrases,
)
from sqlweave.signatures.generation import GenerateSQL
from sqlweave.sqlstruct import pq_gram_similarity, skeleton

CHEAP = ("random", "jaccard", "skeleton", "pqgram")


@pytest.fixture(scope="module")
def train(spider_root: Path) -> list[dspy.Example]:
    return load_spider("train", root=spider_root)


@pytest.fixture(scope="module")
def dev(spider_root: Path) -> list[dspy.Example]:
    return load_spider("dev", root=spider_root)


@pytest.fixture(scope="module")
def pool(train: list[dspy.Example]) -> list[dspy.Example]:
    chosen = eval_slice(train, n=300, seed=0, stratify="db_id")
    assert len({(ex.db_id, ex.question) for ex in chosen}) == len(chosen)
    return chosen


@pytest.fixture(scope="module")
def small_pool(pool: list[dspy.Example]) -> list[dspy.Example]:
    """For the embedding retrievers: encoding is the slow part on a shared 2-core machine."""
    return pool[:120]


def _rename(sql: str) -> str:
    """The same query over other names and values: every column zz, table tt, literal 42."""
    tree = sqlglot.parse_one(sql.replace('"', "'"), read="sqlite")
    for col in tree.find_all(exp.Column):
        col.set("this", exp.to_identifier("zz"))
    for table in tree.find_all(exp.Table):
        table.set("this", exp.to_identifier("tt"))
    for lit in list(tree.find_all(exp.Literal)):
        lit.replace(exp.Literal.number(42))
    return tree.sql(dialect="sqlite")


def _query(question: str, db_id: str, draft_sql: str | None = None) -> dict:
    return {"question": question, "db_id": db_id, "evidence": "", "draft_sql": draft_sql}


# --- leakage guards and common options ----------------------------------------------------------


@pytest.mark.parametrize("name", CHEAP)
def test_dev_examples_cannot_enter_a_pool(name: str, pool, dev) -> None:
    with pytest.raises(ValueError, match="not train data"):
        make_retriever(name, [*pool[:20], dev[0]])
    unlabelled = dspy.Example(question="q?", db_id="x", gold_sql="SELECT 1")
    with pytest.raises(ValueError, match="allow_non_train"):
        make_retriever(name, [unlabelled])
    assert len(make_retriever(name, [*pool[:20], dev[0]], allow_non_train=True)) == 21


@pytest.mark.parametrize("name", CHEAP)
def test_retrieve_never_returns_the_query(name: str, pool) -> None:
    retriever = make_retriever(name, pool)
    for item in pool[::37]:
        query = item.copy(draft_sql=item.gold_sql)
        found = retriever.retrieve(query, len(pool) + 10)
        assert len(found) == len(pool) - 1  # k beyond the pool: everything else
        assert all((ex.db_id, ex.question) != (item.db_id, item.question) for ex in found)
        # Case and surrounding blanks do not hide the query either.
        shouted = _query(f"  {item.question.upper()} ", item.db_id, item.gold_sql)
        assert item not in retriever.retrieve(shouted, 5)


@pytest.mark.parametrize("name", CHEAP)
def test_exclude_same_db_and_one_per_db(name: str, pool, dev) -> None:
    n_dbs = len({ex.db_id for ex in pool})
    query = pool[10].copy(
        question="Something new about this database?", draft_sql=pool[10].gold_sql
    )
    own = query.db_id
    assert sum(ex.db_id == own for ex in pool) >= 2

    plain = make_retriever(name, pool).retrieve(query, len(pool))
    assert any(ex.db_id == own for ex in plain)

    excluded = make_retriever(name, pool, exclude_same_db=True).retrieve(query, len(pool))
    assert excluded and all(ex.db_id != own for ex in excluded)
    assert len(excluded) == sum(ex.db_id != own for ex in pool)

    diverse = make_retriever(name, pool, one_per_db=True).retrieve(query, 1000)
    dbs = [ex.db_id for ex in diverse]
    assert len(dbs) == len(set(dbs)) == n_dbs
    # The diverse list is the plain ranking with repeats of a database dropped.
    first_of_each = []
    for ex in plain:
        if ex.db_id not in {e.db_id for e in first_of_each}:
            first_of_each.append(ex)
    assert diverse[:20] == first_of_each[:20]

    both = make_retriever(name, pool, exclude_same_db=True, one_per_db=True).retrieve(query, 9)
    assert len(both) == 9 and own not in {ex.db_id for ex in both}
    assert len({ex.db_id for ex in both}) == 9


@pytest.mark.parametrize("name", CHEAP)
def test_k_edge_cases_and_determinism(name: str, pool) -> None:
    retriever = make_retriever(name, pool)
    query = _query("List the names of all singers.", "concert_singer", "SELECT name FROM singer")
    assert retriever.retrieve(query, 0) == []
    with pytest.raises(ValueError):
        retriever.retrieve(query, -1)
    first = retriever.retrieve(query, 7)
    assert len(first) == 7
    assert retriever.retrieve(query, 7) == first
    assert make_retriever(name, pool).retrieve(query, 7) == first
    assert make_retriever(name, []).retrieve(query, 3) == []


def test_ties_break_by_pool_order(pool) -> None:
    a = dspy.Example(
        question="Count the rows.", db_id="a", gold_sql="SELECT count(*) FROM t", split="train"
    )
    b = dspy.Example(
        question="Count the rows.", db_id="b", gold_sql="SELECT count(*) FROM u", split="train"
    )
    query = _query("Count the rows.", "c", "SELECT count(*) FROM v")
    for cls in (JaccardRetriever, SkeletonRetriever, PQGramRetriever):
        assert cls([a, b, *pool[:30]]).retrieve(query, 2) == [a, b]
        assert cls([b, a, *pool[:30]]).retrieve(query, 2) == [b, a]


# --- random -------------------------------------------------------------------------------------


def test_random_is_deterministic_per_question(pool) -> None:
    q1 = _query("How many singers are there?", "concert_singer")
    q2 = _query("How many stadiums are there?", "concert_singer")
    r = RandomRetriever(pool, seed=0)
    assert r.retrieve(q1, 9) == RandomRetriever(pool, seed=0).retrieve(q1, 9)
    assert r.retrieve(q1, 9) != r.retrieve(q2, 9)
    assert r.retrieve(q1, 9) != RandomRetriever(pool, seed=1).retrieve(q1, 9)
    # Every pool item is reachable: the scores are a permutation.
    assert sorted(r.scores(q1).tolist()) == list(range(len(pool)))


# --- structure ----------------------------------------------------------------------------------


def test_identical_skeleton_ranks_first(pool) -> None:
    target = next(ex for ex in pool if "Palo Alto" in ex.gold_sql and "EXCEPT" in ex.gold_sql)
    # Hand-written: another database's question with the same shape.
    draft = (
        "SELECT title FROM film WHERE genre = 'Drama' "
        "EXCEPT SELECT movie FROM rating GROUP BY movie HAVING count(*) > 3"
    )
    query = _query("Which dramas were never rated more than three times?", "movie_1", draft)
    assert sum(skeleton(ex.gold_sql) == skeleton(draft) for ex in pool) == 1
    for retriever in (SkeletonRetriever(pool), PQGramRetriever(pool)):
        assert retriever.retrieve(query, 1) == [target]
        assert retriever.scores(query)[pool.index(target)] == 1.0


def test_every_unique_structure_is_found_from_a_renamed_draft(pool) -> None:
    skel = SkeletonRetriever(pool)
    pq = PQGramRetriever(pool)
    skeletons = [skeleton(ex.gold_sql) for ex in pool]
    checked = 0
    for i, ex in enumerate(pool):
        if skeletons.count(skeletons[i]) != 1:
            continue
        draft = _rename(ex.gold_sql)
        assert skeleton(draft) == skeletons[i]
        query = _query("an unrelated question", "other_db", draft)
        assert skel.retrieve(query, 1) == [ex], draft
        sims = [pq_gram_similarity(draft, other.gold_sql) for other in pool]
        if sims.count(1.0) == 1:
            assert pq.retrieve(query, 1) == [ex], draft
        checked += 1
    assert checked >= 30


def test_lazy_skeleton_ranking_equals_a_full_sort(pool, dev) -> None:
    retriever = SkeletonRetriever(pool)
    for item in dev[::41]:
        query = item.copy(draft_sql=item.gold_sql)
        full = np.argsort(-retriever.scores(query), kind="stable").tolist()
        assert list(retriever.ranking(query)) == full


def test_structure_retrievers_without_a_draft(pool) -> None:
    query = _query("How many farms are there?", "farm_other")
    jaccard = JaccardRetriever(pool).retrieve(query, 5)
    for cls in (SkeletonRetriever, PQGramRetriever):
        assert cls(pool).retrieve(query, 5) == jaccard
        assert cls(pool).retrieve({**query, "draft_sql": "  "}, 5) == jaccard
        with pytest.raises(ValueError, match="draft_sql"):
            cls(pool, fallback=None).retrieve(query, 5)
    with pytest.raises(ValueError, match="fallback"):
        SkeletonRetriever(pool, fallback="question")


def test_garbled_draft_still_retrieves(pool) -> None:
    query = _query("q", "x", "SELEC name FRM singer WHERE ((( 'oops")
    for cls in (SkeletonRetriever, PQGramRetriever):
        assert len(cls(pool).retrieve(query, 4)) == 4


# --- questions ----------------------------------------------------------------------------------


def test_jaccard_prefers_shared_words(pool) -> None:
    target = next(ex for ex in pool if ex.question == "How many farms are there?")
    query = _query("How many farms exist?", "farm")
    assert JaccardRetriever(pool).retrieve(query, 1) == [target]


def test_paraphrase_ranks_first_by_question_embedding(small_pool) -> None:
    retriever = QuestionRetriever(small_pool)
    paraphrases = {
        "How many farms are there?": "What is the number of farms?",
        "What are the ids of the trips that lasted the longest and how long did they last?": (
            "Give the id and duration of the longest trips."
        ),
        "What are the characters and duration of actors?": (
            "For each actor, show the character played and the duration."
        ),
    }
    for original, paraphrase in paraphrases.items():
        target = next(ex for ex in small_pool if ex.question == original)
        assert retriever.retrieve(_query(paraphrase, target.db_id), 1) == [target], paraphrase
    assert isinstance(retriever, DemoRetriever)


def test_mask_question_against_a_real_schema(spider_root: Path) -> None:
    db_path = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    phrases = _schema_names_of({"db_path": str(db_path), "db_id": "concert_singer"})
    assert ("singer",) in phrases and ("singer", "id") in phrases and ("age",) in phrases
    masked = mask_question("What is the average age of all singers from France in 2014?", phrases)
    # "average" is a column of the stadium table: "average age" is one masked span.
    assert masked == f"what is the {MASK} of all {MASK} from {UNK} in {UNK} ?"
    assert "France" not in masked and "singer" not in masked and "age" not in masked
    # Quoted values and multi-word names are one <unk>; the first word of a sentence is kept.
    assert mask_question('Show singers named "Joe Sharp" or John Smith.', phrases) == (
        f"show {MASK} named {UNK} or {UNK} ."
    )
    assert mask_question(
        "Song names of each singer id.", schema_phrases(["Song_Name", "Singer_ID"])
    ) == (f"{MASK} of each {MASK} .")


def test_masked_question_retriever_matches_question_skeletons(small_pool, spider_root) -> None:
    db_dir = spider_root / "database"
    template = dspy.Example(
        question="How many singers are there from France?",
        db_id="concert_singer",
        db_path=str(db_dir / "concert_singer" / "concert_singer.sqlite"),
        evidence="",
        gold_sql="SELECT count(*) FROM singer WHERE country = 'France'",
        split="train",
    )
    pool = [template, *small_pool]
    query = {
        "question": "How many pets are there from Germany?",
        "db_id": "pets_1",
        "db_path": str(db_dir / "pets_1" / "pets_1.sqlite"),
    }
    masked = MaskedQuestionRetriever(pool)
    assert masked.retrieve(query, 1) == [template]
    assert masked.scores(query)[0] == pytest.approx(1.0, abs=1e-5)
    # Without masking the two questions are merely similar.
    assert QuestionRetriever(pool).scores(query)[0] < 0.95
    # The query's own database name lookup also works from a db_id alone.
    assert masked.text({"question": "How many pets?", "db_id": "pets_1"}) == f"how many {MASK} ?"


# --- factory and demos --------------------------------------------------------------------------


def test_make_retriever_names(pool, monkeypatch) -> None:
    assert set(RETRIEVER_NAMES) == {
        "random",
        "question",
        "masked_question",
        "jaccard",
        "skeleton",
        "pqgram",
        "graph",
    }
    for name in CHEAP:
        retriever = make_retriever(name, pool[:40])
        assert retriever.name == name and isinstance(retriever, DemoRetriever)
    assert make_retriever("pqgram", pool[:40], p=1, q=2).q == 2
    with pytest.raises(ValueError, match="unknown retriever 'bm25'.*pqgram"):
        make_retriever("bm25", pool)

    monkeypatch.setitem(sys.modules, "sqlweave.gnn.retriever", None)
    with pytest.raises(ImportError, match="'graph' retriever needs sqlweave.gnn.retriever"):
        make_retriever("graph", pool)

    class FakeGraphRetriever:
        name = "graph"

        def __init__(self, pool, **options):
            self.pool, self.options = list(pool), options

        def retrieve(self, example, k):
            return self.pool[:k]

    fake = types.ModuleType("sqlweave.gnn.retriever")
    fake.GraphRetriever = FakeGraphRetriever
    monkeypatch.setitem(sys.modules, "sqlweave.gnn.retriever", fake)
    graph = make_retriever("graph", pool, k_hops=2)
    assert isinstance(graph, FakeGraphRetriever) and graph.options == {"k_hops": 2}


def test_as_demos_feed_a_predictor_per_call(pool) -> None:
    found = SkeletonRetriever(pool).retrieve(
        _query("How many singers are there?", "concert_singer", "SELECT count(*) FROM singer"), 2
    )
    demos = as_demos(found, schema_text=lambda ex: f"-- schema of {ex.db_id}")
    assert [d.sql for d in demos] == [ex.gold_sql for ex in found]
    assert demos[0].db_schema == f"-- schema of {found[0].db_id}"
    assert set(demos[0].inputs().keys()) == {"dialect", "db_schema", "question", "evidence"}
    assert set(as_demos(found)[0].toDict()) == set(GenerateSQL.fields)
    assert as_demos(found)[0].db_schema == ""
    assert as_demos(found, extra_fields={"hints": ""})[0].hints == ""

    predictor = dspy.Predict(GenerateSQL)
    lm = DummyLM([{"sql": "SELECT count(*) FROM singer"}])
    with dspy.context(lm=lm):
        pred = predictor(
            dialect="sqlite",
            db_schema="CREATE TABLE singer (singer_id INT)",
            question="How many singers are there?",
            evidence="",
            demos=demos,
        )
    assert pred.sql == "SELECT count(*) FROM singer"
    prompt = json.dumps(lm.history[-1]["messages"])
    for ex in found:
        assert json.dumps(ex.question)[1:-1] in prompt
    assert predictor.demos == []  # per-call demos do not stick to the predictor


def test_pick_demos_applies_every_filter_and_reads_a_lazy_ranking_no_further_than_it_needs() -> (
    None
):
    """The one demo filter both retrievers use: the question itself, its database, one per
    database, own database first; it stops reading the ranking at the k-th pick."""
    from sqlweave.demo_choice import pick_demos

    dbs = ["a", "b", "a", "c", "b", "a"]  # position -> database; the question is on "a"
    read: list[int] = []

    def ranking():
        for i in range(len(dbs)):
            read.append(i)
            yield i

    def pick(k: int, **switches: bool) -> list[int]:
        read.clear()
        return pick_demos(ranking(), dbs.__getitem__, "a", k, is_query=lambda i: i == 0, **switches)

    assert pick(3) == [1, 2, 3] and read == [0, 1, 2, 3]
    assert pick(9, exclude_same_db=True) == [1, 3, 4]
    assert pick(9, one_per_db=True) == [1, 2, 3]
    assert pick(2, same_db_first=True) == [2, 5] and read == [0, 1, 2, 3, 4, 5]
    assert pick(9, same_db_first=True, exclude_same_db=True) == [1, 3, 4]
    assert pick(0) == []
