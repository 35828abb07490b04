"""Prompts keep what repeats across questions ahead of what does not (issue 15, items 4-5).

A local model reuses the KV cache for the longest common token prefix with its previous call, so
the demo turns (the same for every question of a compiled program) and the schema (the same for
every question on one database) must come before the question; then a question costs only its
own tail.
"""

from __future__ import annotations

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave.adapter import SQLAdapter
from sqlweave.signatures import GenerateSQL, LinkSchema

SCHEMA = "CREATE TABLE singer (\n  singer_id INT,\n  name TEXT,\n  age INT\n);"
DEMOS = [
    dspy.Example(
        dialect="sqlite",
        db_schema="CREATE TABLE stadium (\n  name TEXT,\n  capacity INT\n);",
        question="What is the largest capacity?",
        evidence="",
        sql="SELECT max(capacity) FROM stadium",
    ),
    dspy.Example(
        dialect="sqlite",
        db_schema=SCHEMA,
        question="List the names.",
        evidence="",
        sql="SELECT name FROM singer",
    ),
]
QUESTIONS = ("How many singers are there?", "What is the average age of singers?")


def _inputs(question: str) -> dict[str, str]:
    return {"dialect": "sqlite", "db_schema": SCHEMA, "question": question, "evidence": ""}


def _text(messages: list[dict[str, str]]) -> str:
    """The messages as one string, turn by turn, as a chat template lays them out."""
    return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages)


def _shared(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("prefill", [False, True])
def test_demo_turns_and_schema_come_before_the_question(prefill: bool) -> None:
    adapter = SQLAdapter()
    first, second = (
        adapter._plain_messages(GenerateSQL, DEMOS, _inputs(q), prefill=prefill) for q in QUESTIONS
    )
    # Every demo is a user/assistant pair ahead of the question's turn, identical for both.
    assert first[:4] == second[:4]
    assert [m["role"] for m in first[:4]] == ["user", "assistant"] * 2
    final = 4
    assert first[final]["role"] == "user" and QUESTIONS[0] in first[final]["content"]
    assert all(QUESTIONS[0] not in m["content"] for m in first[:final])
    # The two prompts part only at the question: demos, schema and instructions are shared.
    a, b = _text(first), _text(second)
    shared = _shared(a, b)
    assert a.index(SCHEMA, a.index(DEMOS[1].sql)) < shared
    assert a.index("-- Using valid SQLite") < shared
    assert a[shared:].startswith(QUESTIONS[0][_shared(*QUESTIONS) :])
    assert a[: a.index(QUESTIONS[0])] == b[: b.index(QUESTIONS[1])]


def test_predict_with_demos_sends_them_before_the_question() -> None:
    predict = dspy.Predict(GenerateSQL)
    predict.demos = DEMOS
    lm = DummyLM([{"sql": "SELECT count(*) FROM singer"}, {"sql": "SELECT avg(age) FROM singer"}])
    with dspy.context(lm=lm, adapter=SQLAdapter()):
        for question in QUESTIONS:
            predict(**_inputs(question))
    first, second = (entry["messages"] for entry in lm.history[-2:])
    a, b = _text(first), _text(second)
    assert a[: a.index(QUESTIONS[0])] == b[: b.index(QUESTIONS[1])]
    assert a.index(DEMOS[0].sql) < a.index(DEMOS[1].sql) < a.index(SCHEMA, a.index(DEMOS[1].sql))


def test_chat_adapter_fallback_also_puts_demos_first() -> None:
    predict = dspy.Predict(LinkSchema)
    predict.demos = [
        dspy.Example(
            dialect="sqlite",
            db_schema=SCHEMA,
            question="List the names.",
            evidence="",
            columns=["singer.name"],
        )
    ]
    lm = DummyLM([{"columns": ["singer.age"]}, {"columns": ["singer.age"]}])
    with dspy.context(lm=lm, adapter=SQLAdapter()):
        for question in QUESTIONS:
            predict(**_inputs(question))
    first, second = (entry["messages"] for entry in lm.history[-2:])
    a, b = _text(first), _text(second)
    assert a.index("List the names.") < a.index(QUESTIONS[0])
    assert a[: a.index(QUESTIONS[0])] == b[: b.index(QUESTIONS[1])]
