"""``naive`` and ``weave`` wiring with DummyLM: prompts, stages and switches (no real model)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.db import Database
from sqlweave.programs.naive import SYSTEM, naive_messages, reply_sql


@pytest.fixture()
def db(tmp_path: Path, demo_concert_db: Path) -> Database:
    copy = tmp_path / "concert_singer.sqlite"
    shutil.copy(demo_concert_db, copy)
    return Database.open(copy)


def _pool() -> list[dspy.Example]:
    rows = [
        ("How many cars are from Japan?", "SELECT count(*) FROM cars WHERE country = 'Japan'"),
        ("List the names of all ships.", "SELECT name FROM ship"),
        ("How many dogs are there?", "SELECT count(*) FROM dogs"),
    ]
    return [
        dspy.Example(
            question=q, gold_sql=s, db_id=f"db{i}", split="train", evidence="", db_path=""
        ).with_inputs("question")
        for i, (q, s) in enumerate(rows)
    ]


def test_naive_prompt_is_the_reference_prompt(db: Database) -> None:
    messages = naive_messages(db, "How many singers?", "singer means a row of singer")
    assert messages[0] == {"role": "system", "content": SYSTEM.format(dialect="SQLite")}
    user = messages[1]["content"]
    ddl, rest = user.split("\n\n", 1)
    assert ddl.count("CREATE TABLE") == 4 and ddl.startswith('CREATE TABLE "stadium"')
    assert rest == "Question: How many singers?\nHint: singer means a row of singer"
    assert "Hint" not in naive_messages(db, "How many singers?")[1]["content"]


def test_naive_extracts_like_the_reference_script(db: Database) -> None:
    assert reply_sql("Here:\n```sql\nSELECT 1\n```\nbye") == "SELECT 1"
    assert reply_sql("  SELECT count(*) FROM singer  ") == "SELECT count(*) FROM singer"
    lm = DummyLM([{"sql": "```sql\nSELECT count(*) FROM singer\n```"}])
    with dspy.context(lm=lm):
        pred = programs.get("naive")(question="How many singers are there?", db=db)
    assert pred.sql == "SELECT count(*) FROM singer"
    sent = lm.history[-1]
    assert sent["messages"][0]["role"] == "system"
    assert sent["kwargs"]["max_tokens"] == 256 and sent["kwargs"]["temperature"] == 0.0


def test_weave_prompt_has_schema_first_then_demos_values_question(db: Database) -> None:
    from dspy.clients.base_lm import GLOBAL_HISTORY

    lm = DummyLM([{"sql": "SELECT count(*) FROM singer WHERE country = 'France'"}] * 10)
    program = programs.get("weave", num_demos=2, samples=3, pool=_pool())
    before = len(GLOBAL_HISTORY)
    with dspy.context(lm=lm):
        pred = program(question="How many singers are from France?", db=db)
    assert pred.sql == "SELECT count(*) FROM singer WHERE country = 'France'"
    assert pred.stages == ["demos", "values", "generator", "sampler", "selector", "corrector"]
    # Two equal answers settle a vote of three: the third sample is never drawn.
    assert len(pred.candidates) == 2 and len(pred.demos) == 2
    assert "singer.Country = 'France'" in pred.value_hints
    prompt = lm.history[0]["messages"][-1]["content"]
    assert prompt.startswith('CREATE TABLE "stadium"')
    assert prompt.index("How many cars are from Japan?") < prompt.index("France'")
    assert prompt.rstrip().endswith("How many singers are from France?")
    # One greedy call, then a sample on an LM copy with its own temperature and rollout id.
    assert len(GLOBAL_HISTORY) - before == 2


def test_weave_repairs_a_failing_query(db: Database) -> None:
    lm = DummyLM([{"sql": "SELECT nme FROM singer"}, {"corrected_sql": "SELECT name FROM singer"}])
    program = programs.get("weave", num_demos=0, samples=1, value_hints=False)
    with dspy.context(lm=lm):
        pred = program(question="Names of singers?", db=db)
    assert pred.sql == "SELECT name FROM singer"
    assert pred.stages == ["generator", "corrector"]
    assert "no such column" in json.dumps(pred.history).lower()


def test_weave_candidate_rules_mend_candidates_before_the_vote(db: Database) -> None:
    # Two candidates name a column on the wrong alias and fail; mended, they agree and win the
    # vote over the third. Without the rules the working third wins.
    wrong = "SELECT T2.Name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.Singer_ID = T2.Singer_ID"
    other = "SELECT Country FROM singer"
    answers = [{"sql": wrong}, {"sql": wrong}, {"sql": other}]
    plain = programs.get("weave", samples=3, value_hints=False, repair_rounds=0)
    with dspy.context(lm=DummyLM(list(answers))):
        before = plain(question="Names of singers in concerts?", db=db)
    assert before.sql == other and "corrector" not in before.stages
    mending = programs.get(
        "weave", samples=3, value_hints=False, repair_rounds=0, candidate_rules=True
    )
    assert mending.switches["candidate_rules"] is True
    with dspy.context(lm=DummyLM(list(answers))):
        after = mending(question="Names of singers in concerts?", db=db)
    assert after.candidates[0] == after.candidates[1] != wrong
    assert "T1.Name" in after.sql and after.stages == [
        "generator",
        "sampler",
        "corrector",
        "selector",
    ]
    assert db.execute(after.sql).rows  # it runs


@pytest.mark.parametrize("config", sorted(programs.get("weave").ABLATIONS))
def test_every_weave_configuration_runs(config: str, db: Database) -> None:
    switches = programs.get("weave").ABLATIONS[config]
    program = programs.get("weave", pool=_pool(), **switches)
    lm = DummyLM([{"sql": "SELECT name FROM singer"}] * 10)
    with dspy.context(lm=lm):
        assert program(question="Names of singers?", db=db).sql == "SELECT name FROM singer"


@pytest.mark.parametrize(
    "switches",
    [{"samples": 0}, {"num_demos": -2}, {"demo_strategy": "psychic"}, {"schema_layout": "xml"}],
)
def test_weave_rejects_bad_switches(switches: dict) -> None:
    with pytest.raises(ValueError):
        programs.get("weave", **switches)


def test_direct_schema_layouts(db: Database) -> None:
    for layout in ("native", "compact"):
        lm = DummyLM([{"sql": "SELECT 1"}])
        with dspy.context(lm=lm):
            programs.get("direct", schema_layout=layout)(question="q?", db=db)
        prompt = lm.history[-1]["messages"][-1]["content"]
        # Native DDL keeps SQLite's creation order (stadium first); compact sorts tables by name.
        assert prompt.startswith('CREATE TABLE "stadium"') == (layout == "native")
    with pytest.raises(ValueError):
        programs.get("direct", schema_layout="yaml")
