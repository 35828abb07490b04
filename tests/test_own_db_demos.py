"""Demos for a question come from its own database first (a program compiled over several)."""

from __future__ import annotations

import json

import dspy
import numpy as np
import pytest
from conftest import DEMO_CONCERT_DB
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.optimizers.knn import SAME_DB_SCHEMA, attach_knn, nearest_first
from sqlweave.programs.stages.demos import DemoSource
from sqlweave.programs.stages.retrieval import make_retriever

QUESTION = "How many singers are there?"


def _demo(question: str, sql: str) -> dict[str, str]:
    return {
        "dialect": "sqlite",
        "db_schema": "CREATE TABLE t (a INT)",
        "question": question,
        "evidence": "",
        "sql": sql,
    }


def test_nearest_first_puts_the_own_database_ahead_of_better_scores():
    scores = np.array([0.9, 0.2, 0.8, 0.5])
    dbs = ["a", "b", "a", "b"]
    assert nearest_first(scores, dbs, "b", 3) == [3, 1, 0]
    # no item of the question's database (or none named): dspy.KNN's order
    assert nearest_first(scores, dbs, "c", 2) == [0, 2]
    assert nearest_first(scores, dbs, None, 4) == [0, 2, 3, 1]
    assert nearest_first(np.array(0.3), ["a"], "a", 2) == [0]  # one item squeezes to 0-d


def test_knn_program_shows_demos_of_the_questions_own_database():
    # The other database's item asks the very question; the own database's item another one.
    pool = [
        {
            "question": QUESTION,
            "db_id": "shop",
            "demos": {"generate": _demo(QUESTION, "SELECT 'A'")},
        },
        {
            "question": "List the stadium names.",
            "db_id": "concert_singer",
            "demos": {"generate": _demo("List the stadium names.", "SELECT 'B'")},
        },
    ]
    compiled = attach_knn(programs.get("direct"), pool, 1)

    def prompt_for(**where) -> str:
        lm = DummyLM([{"sql": "SELECT 2"}])
        with dspy.context(lm=lm):
            compiled(question=QUESTION, **where)
        return json.dumps(lm.history[-1]["messages"])

    own = prompt_for(db=str(DEMO_CONCERT_DB))
    assert "SELECT 'B'" in own and "SELECT 'A'" not in own
    assert "SELECT 'B'" in prompt_for(db_path=str(DEMO_CONCERT_DB))
    # a pool item without db_id (an older artefact) is another database's: nearest wins
    older = attach_knn(programs.get("direct"), [{**p, "db_id": None} for p in pool], 1)
    lm = DummyLM([{"sql": "SELECT 2"}])
    with dspy.context(lm=lm):
        older(question=QUESTION, db=str(DEMO_CONCERT_DB))
    assert "SELECT 'A'" in json.dumps(lm.history[-1]["messages"])


def _pool() -> list[dspy.Example]:
    return [
        dspy.Example(question=QUESTION, db_id="shop", gold_sql="SELECT 'A'", split="train"),
        dspy.Example(
            question="List the stadium names.",
            db_id="concert_singer",
            gold_sql="SELECT 'B'",
            split="train",
        ),
        dspy.Example(
            question="How many shops?", db_id="shop", gold_sql="SELECT 'C'", split="train"
        ),
    ]


def test_retrievers_rank_the_own_database_first_when_asked():
    query = {"question": QUESTION, "db_id": "concert_singer"}
    plain = make_retriever("jaccard", _pool())
    assert [ex.gold_sql for ex in plain.retrieve(query, 2)] == ["SELECT 'A'", "SELECT 'C'"]
    own = make_retriever("jaccard", _pool(), same_db_first=True)
    assert [ex.gold_sql for ex in own.retrieve(query, 2)] == ["SELECT 'B'", "SELECT 'A'"]
    # excluding the own database wins over preferring it
    both = make_retriever("jaccard", _pool(), same_db_first=True, exclude_same_db=True)
    assert "SELECT 'B'" not in [ex.gold_sql for ex in both.retrieve(query, 3)]


def test_a_demo_source_given_its_own_pool_prefers_the_questions_database():
    db = type("Db", (), {"name": "concert_singer", "path": None})()
    source = DemoSource("jaccard", 1, pool=_pool())
    assert [ex.gold_sql for ex in source.retrieve(QUESTION, db)] == ["SELECT 'B'"]
    plain = DemoSource("jaccard", 1, pool=_pool(), options={"same_db_first": False})
    assert [ex.gold_sql for ex in plain.retrieve(QUESTION, db)] == ["SELECT 'A'"]


def _two_db_pool() -> list[dict]:
    return [
        {
            "question": "How many shops?",
            "db_id": "shop",
            "demos": {"generate": _demo("How many shops?", "SELECT 'A'")},
        },
        {
            "question": "List the stadium names.",
            "db_id": "concert_singer",
            "demos": {"generate": _demo("List the stadium names.", "SELECT 'B'")},
        },
    ]


def _messages(program) -> list[dict]:
    lm = DummyLM([{"sql": "SELECT 2"}])
    with dspy.context(lm=lm):
        program(question=QUESTION, db=str(DEMO_CONCERT_DB))
    return lm.history[-1]["messages"]


@pytest.mark.parametrize("layout", ["chat", "script"])
def test_own_database_demos_are_turns_pointing_at_the_questions_schema(layout):
    compiled = attach_knn(programs.get("direct", prompt_layout=layout), _two_db_pool(), 2)
    messages = _messages(compiled)
    own = next(m["content"] for m in messages[:-1] if "List the stadium names." in m["content"])
    assert SAME_DB_SCHEMA in own and "CREATE TABLE t" not in own
    # the other database's demo keeps its own schema; the question's turn holds no demo
    other = next(m["content"] for m in messages[:-1] if "How many shops?" in m["content"])
    assert "CREATE TABLE t" in other and SAME_DB_SCHEMA not in other
    assert "List the stadium names." not in messages[-1]["content"]
    assert compiled.knn_pool["same_db"] == "turns"

    full = attach_knn(
        programs.get("direct", prompt_layout=layout), _two_db_pool(), 2, same_db="full"
    )
    own = next(m["content"] for m in _messages(full) if "List the stadium names." in m["content"])
    assert "CREATE TABLE t" in own and SAME_DB_SCHEMA not in own


@pytest.mark.parametrize("layout", ["chat", "script"])
def test_inline_own_database_demos_follow_the_questions_schema(layout):
    compiled = attach_knn(
        programs.get("direct", prompt_layout=layout), _two_db_pool(), 2, same_db="inline"
    )
    messages = _messages(compiled)
    final = messages[-1]["content"]
    # inside the question's turn, after its schema, before the question
    schema_end = final.index('REFERENCES "concert"')
    assert schema_end < final.index("List the stadium names.") < final.index("SELECT 'B'")
    assert final.index("SELECT 'B'") < final.index(QUESTION)
    assert SAME_DB_SCHEMA not in json.dumps(messages) and "after_schema" not in json.dumps(messages)
    other = next(m["content"] for m in messages[:-1] if "How many shops?" in m["content"])
    assert "CREATE TABLE t" in other
    with pytest.raises(ValueError, match="same_db must be one of"):
        attach_knn(programs.get("direct"), _two_db_pool(), 2, same_db="sideways")


def test_inline_prompts_start_with_the_schema_whatever_demos_the_question_draws():
    """Two questions on one database share the prompt up to the end of the schema: the engine's
    prefix cache reads the schema once (the point of ``same_db="inline"``)."""
    pool = [
        *_two_db_pool(),
        {
            "question": "How many concerts?",
            "db_id": "concert_singer",
            "demos": {"generate": _demo("How many concerts?", "SELECT 'C'")},
        },
    ]
    compiled = attach_knn(programs.get("direct", prompt_layout="script"), pool, 1, same_db="inline")
    prompts = []
    for question in ("List every stadium.", "How many concerts were held?"):
        lm = DummyLM([{"sql": "SELECT 2"}])
        with dspy.context(lm=lm):
            compiled(question=question, db=str(DEMO_CONCERT_DB))
        prompts.append(json.dumps(lm.history[-1]["messages"]))
    a, b = prompts
    shared = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    assert "SELECT 'B'" in a and "SELECT 'C'" in b  # different demos were drawn
    assert a[:shared].count("CREATE TABLE") >= 4  # ... after the whole schema
