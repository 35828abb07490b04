"""RSL-SQL's control flow on real Spider / BIRD databases, with DummyLM standing in for the model.

Calls are told apart by their signature's instruction (it is in the system message under any
adapter), so each test checks which stages ran, in which order, and what their prompts held.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Sequence
from typing import Any

import dspy
import numpy as np
import pytest
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.data import load_spider
from sqlweave.db import Database
from sqlweave.programs import stages
from sqlweave.programs.rsl import RSLSQL, as_items, component_hints, random_rows
from sqlweave.programs.stages.retrieval import make_retriever

QUESTION = "Names of singers older than 40?"
OLDER_40 = "SELECT name FROM singer WHERE age > 40"  # 3 rows
OLDER_30 = "SELECT name FROM singer WHERE age > 30"  # 4 rows
OLDER_40_AGAIN = "SELECT name FROM singer WHERE 40 < age"
EMPTY = "SELECT name FROM singer WHERE age > 1000"
BROKEN = "SELECT nme FROM singer"
LINK = {"columns": '["singer.Name", "singer.Age"]'}
PARTS = {
    "elements": '["singer.Name", "singer.Age"]',
    "conditions": '["singer.Age > 40"]',
    "keywords": '["WHERE"]',
}

KINDS = {
    "List the database columns": "link",
    "Break the question down": "extract",
    "Pick the candidate": "select",
    "Fix the SQL query": "correct",
    "Reply with one read-only SQL": "generate",
}


class HashEncoder:
    """A tiny deterministic bag-of-words encoder, so retrieval needs no sentence model."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, sum(map(ord, word)) % 64] += 1.0
        return out


def kinds(lm: DummyLM) -> list[str]:
    """The stage of every LM call, from its instruction (in the system message, or in the final
    user turn of a SQL-writing prompt)."""
    out = []
    for entry in lm.history:
        users = [m["content"] for m in entry["messages"] if m["role"] == "user"]
        text = entry["messages"][0]["content"] + "\n" + users[-1]
        out.append(next((v for k, v in KINDS.items() if k in text), "?"))
    return out


def prompt(lm: DummyLM, i: int) -> str:
    """The whole conversation of call ``i`` (demos included) as text."""
    return json.dumps(lm.history[i]["messages"])


def last_user(lm: DummyLM, i: int) -> str:
    return lm.history[i]["messages"][-1]["content"]


@pytest.fixture()
def db(spider_db) -> Database:
    return spider_db("concert_singer")


@pytest.fixture(scope="module")
def pool(spider_root) -> list[dspy.Example]:
    train = load_spider("train", root=spider_root.parent)
    return [ex for ex in train if ex.db_id in ("department_management", "farm")]


@pytest.fixture(scope="module")
def retriever(pool):
    return make_retriever("masked_question", pool, encoder=HashEncoder())


def rsl(pool, retriever, **switches: Any) -> RSLSQL:
    return RSLSQL(pool=pool, retriever=retriever, **switches)


def run(program: RSLSQL, answers: list[dict[str, str]], db: Database, **inputs: Any):
    lm = DummyLM(answers)
    with dspy.context(lm=lm):
        pred = program(question=inputs.pop("question", QUESTION), db=db, **inputs)
    return pred, lm


# --- the full system ------------------------------------------------------------------------------


def test_full_pipeline_runs_the_four_steps_in_order(db, pool, retriever) -> None:
    answers = [LINK, {"sql": OLDER_40}, PARTS, {"sql": OLDER_30}, {"choice": "2"}]
    pred, lm = run(rsl(pool, retriever), answers, db)
    assert kinds(lm) == ["link", "generate", "extract", "generate", "select"]
    assert pred.stages == [
        "linker",  # forward
        "generator",  # SQL1
        "linker",  # backward
        "extractor",  # components
        "generator",  # SQL2
        "selector",
        "corrector",
    ]
    assert (pred.sql1, pred.sql2, pred.sql3) == (OLDER_40, OLDER_30, OLDER_30)
    assert pred.sql == OLDER_30 and pred.choice == 2 and pred.correction_rounds == 0
    assert pred.candidates == [OLDER_40, OLDER_30]
    assert [h["sql"] for h in pred.history] == [OLDER_30]  # ran with rows: no correction
    assert pred.forward_linked == ["singer.Age", "singer.Name"]
    # Backward linking adds every column named in SQL1, in any table (stadium also has Name).
    assert "stadium.Name" in pred.backward_linked and "stadium.Name" in pred.linked
    assert pred.simplified_tables == ["singer", "stadium"]
    assert pred.components == {
        "elements": ["singer.Name", "singer.Age"],
        "conditions": ["singer.Age > 40"],
        "keywords": ["WHERE"],
    }
    assert len(pred.demos) == 3


def test_prompts_hold_what_the_paper_puts_there(db, pool, retriever) -> None:
    answers = [LINK, {"sql": OLDER_40}, PARTS, {"sql": OLDER_30}, {"choice": "1"}]
    pred, lm = run(rsl(pool, retriever), answers, db)
    link, sql1, extract, sql2, select = range(5)
    # Forward linking: full schema with value samples, no demos.
    assert "concert_Name" in last_user(lm, link) and "example rows" in last_user(lm, link)
    assert len(lm.history[link]["messages"]) == 2
    # SQL1: full schema, samples, foreign keys, the forward list as hints, and the demos.
    text = last_user(lm, sql1)
    assert "concert_Name" in text and "FOREIGN KEY" in text and "3 example rows" in text
    assert "Columns likely needed: singer.Age, singer.Name" in text
    assert QUESTION in text
    whole = prompt(lm, sql1)
    for demo_question in pred.demos:
        assert json.dumps(demo_question)[1:-1] in whole
    assert len(lm.history[sql1]["messages"]) == 1 + 2 * 3  # 3 demo pairs, then the question
    # Components and SQL2 see the simplified schema only.
    for i in (extract, sql2, select):
        assert "concert_Name" not in last_user(lm, i) and "Song_Name" not in last_user(lm, i)
        assert "Is_male" not in last_user(lm, i)
    assert "Conditions: singer.Age > 40" in last_user(lm, sql2)
    assert "Keywords: WHERE" in last_user(lm, sql2)
    assert len(lm.history[sql2]["messages"]) == 1 + 2 * 3
    # Selection: both candidates with their results.
    assert OLDER_40 in last_user(lm, select) and OLDER_30 in last_user(lm, select)
    assert "Rose White" in last_user(lm, select)
    assert pred.sql == OLDER_40


def test_no_selection_call_when_both_answers_agree(db, pool, retriever) -> None:
    answers = [LINK, {"sql": OLDER_40}, PARTS, {"sql": OLDER_40_AGAIN}]
    pred, lm = run(rsl(pool, retriever), answers, db)
    assert kinds(lm) == ["link", "generate", "extract", "generate"]
    assert "selector" in pred.stages and pred.sql == OLDER_40  # it ran, without a call


def test_self_correction_on_an_empty_result_is_multi_turn_and_bounded(db, pool, retriever) -> None:
    answers = [
        LINK,
        {"sql": EMPTY},
        PARTS,
        {"sql": BROKEN},  # fails, so selection needs no call: SQL1 is the only one that ran
        {"corrected_sql": BROKEN},
        {"corrected_sql": EMPTY},
    ]
    pred, lm = run(rsl(pool, retriever, correction_rounds=2), answers, db)
    assert kinds(lm) == ["link", "generate", "extract", "generate", "correct", "correct"]
    assert pred.sql3 == EMPTY and pred.correction_rounds == 2
    assert [h["sql"] for h in pred.history] == [EMPTY, BROKEN, EMPTY]
    # The second correction sees the first attempt too (multi-turn), and the empty result counts
    # as a failure (RSL retries on empty results, not only on errors).
    assert "Empty result" in last_user(lm, 4)
    assert BROKEN in last_user(lm, 5) and "Earlier attempts" in last_user(lm, 5)
    # Nothing better ran: the last query that ran is kept. Correction sees the simplified schema.
    assert pred.sql == EMPTY
    assert "concert_Name" not in last_user(lm, 4)


def test_self_correction_stops_at_the_first_non_empty_answer(db, pool, retriever) -> None:
    answers = [LINK, {"sql": BROKEN}, PARTS, {"sql": BROKEN}, {"corrected_sql": OLDER_40}]
    pred, lm = run(rsl(pool, retriever), answers, db)
    assert kinds(lm)[-1] == "correct" and kinds(lm).count("correct") == 1
    assert pred.sql == OLDER_40 and pred.correction_rounds == 1


# --- switches ------------------------------------------------------------------------------------


def test_base_prompt_is_one_call_without_demos_samples_or_hints(db, pool, retriever) -> None:
    pred, lm = run(rsl(pool, retriever, **RSLSQL.ABLATIONS["base"]), [{"sql": OLDER_40}], db)
    assert kinds(lm) == ["generate"] and pred.stages == ["generator"]
    text = last_user(lm, 0)
    assert "FOREIGN KEY" in text and "concert_Name" in text
    assert "example rows" not in text and "Columns likely needed" not in text
    assert len(lm.history[0]["messages"]) == 1 and pred.demos == []
    assert pred.sql == OLDER_40 and pred.sql2 == "" and pred.candidates == [OLDER_40]


def test_demos_and_value_samples_switch_on_one_at_a_time(db, pool, retriever) -> None:
    _, lm = run(rsl(pool, retriever, **RSLSQL.ABLATIONS["demos"]), [{"sql": OLDER_40}], db)
    assert len(lm.history[0]["messages"]) == 1 + 2 * 3
    assert "example rows" not in last_user(lm, 0)
    _, lm = run(rsl(pool, retriever, **RSLSQL.ABLATIONS["value_samples"]), [{"sql": OLDER_40}], db)
    assert "3 example rows from table singer" in last_user(lm, 0)


def test_step2_without_components_makes_no_extraction_call(db, pool, retriever) -> None:
    program = rsl(pool, retriever, **RSLSQL.ABLATIONS["step2_no_components"])
    assert program.extract_components is None
    pred, lm = run(program, [LINK, {"sql": OLDER_40}, {"sql": OLDER_30}], db)
    assert kinds(lm) == ["link", "generate", "generate"]
    assert pred.sql == OLDER_30 and pred.components == {} and pred.hints[1] == ""
    assert "concert_Name" not in last_user(lm, 2)  # still the simplified schema


@pytest.mark.parametrize("dropped", ["elements", "conditions", "keywords"])
def test_each_component_can_be_left_out(db, pool, retriever, dropped: str) -> None:
    program = rsl(pool, retriever, **RSLSQL.ABLATIONS[f"step2_no_{dropped}"])
    pred, lm = run(program, [LINK, {"sql": OLDER_40}, PARTS, {"sql": OLDER_30}], db)
    assert kinds(lm) == ["link", "generate", "extract", "generate"]
    assert set(pred.components) == {"elements", "conditions", "keywords"} - {dropped}
    assert f"{dropped.capitalize()}:" not in last_user(lm, 3)
    assert pred.sql == OLDER_30  # measured after step 2: no selection, no correction


def test_backward_only_linking_skips_the_forward_call(db, pool, retriever) -> None:
    program = rsl(pool, retriever, **RSLSQL.ABLATIONS["backward_linking_only"])
    pred, lm = run(program, [{"sql": OLDER_40}, PARTS, {"sql": OLDER_30}, {"choice": "1"}], db)
    assert kinds(lm) == ["generate", "extract", "generate", "select"]
    assert pred.forward_linked == [] and "Columns likely needed" not in last_user(lm, 0)
    assert "singer.Name" in pred.linked and "concert" not in pred.simplified_tables


def test_forward_only_linking_ignores_the_columns_of_sql1(db, pool, retriever) -> None:
    program = rsl(pool, retriever, **RSLSQL.ABLATIONS["forward_linking_only"])
    answers = [LINK, {"sql": OLDER_40}, PARTS, {"sql": OLDER_30}, {"choice": "1"}]
    pred, _ = run(program, answers, db)
    assert pred.backward_linked == [] and pred.linked == ["singer.Age", "singer.Name"]
    assert pred.simplified_tables == ["singer"]


EXPECTED_CALLS = {
    "base": ["generate"],
    "demos": ["generate"],
    "value_samples": ["generate"],
    "step1": ["link", "generate"],
    "step2": ["link", "generate", "extract", "generate"],
    "step3": ["link", "generate", "extract", "generate", "select"],
    "full": ["link", "generate", "extract", "generate", "select"],
    "step2_no_descriptions": ["link", "generate", "extract", "generate"],
    "step2_no_components": ["link", "generate", "generate"],
    "step2_no_augmentation": ["link", "generate", "generate"],
    "step2_no_elements": ["link", "generate", "extract", "generate"],
    "step2_no_conditions": ["link", "generate", "extract", "generate"],
    "step2_no_keywords": ["link", "generate", "extract", "generate"],
    "forward_linking_only": ["link", "generate", "extract", "generate", "select"],
    "backward_linking_only": ["generate", "extract", "generate", "select"],
}
ANSWER = {"link": LINK, "extract": PARTS, "select": {"choice": "2"}}


def test_every_ablation_is_listed_here() -> None:
    assert set(RSLSQL.ABLATIONS) == set(EXPECTED_CALLS)


@pytest.mark.parametrize("name", sorted(RSLSQL.ABLATIONS))
def test_every_ablation_constructs_and_runs(db, pool, retriever, name: str) -> None:
    switches = RSLSQL.ABLATIONS[name]
    program = programs.get("rsl", pool=pool, retriever=retriever, **switches)
    sqls = iter([OLDER_40, OLDER_30])
    answers = [ANSWER.get(k) or {"sql": next(sqls)} for k in EXPECTED_CALLS[name]]
    pred, lm = run(program, answers, db)
    assert kinds(lm) == EXPECTED_CALLS[name]
    last_generated = OLDER_30 if EXPECTED_CALLS[name].count("generate") == 2 else OLDER_40
    assert pred.sql == last_generated
    assert len(pred.demos) == (0 if switches.get("num_demos") == 0 else 3)
    # The artefact rebuild path: the recorded switches give the same configuration back.
    rebuilt = programs.get("rsl", **program.switches)
    assert rebuilt.switches == program.switches
    assert [n for n, _ in rebuilt.named_predictors()] == [n for n, _ in program.named_predictors()]


def test_predictors_are_named_after_the_stages(pool, retriever) -> None:
    names = [n for n, _ in rsl(pool, retriever).named_predictors()]
    assert names == [
        "linker.forward_linker.link",
        "preliminary_sql",
        "extract_components",
        "augmented_sql",
        "selector.select",
        "corrector.correct",
    ]
    base = [n for n, _ in rsl(pool, retriever, **RSLSQL.ABLATIONS["base"]).named_predictors()]
    assert base == ["preliminary_sql"]


def test_bad_switch_values_are_refused() -> None:
    with pytest.raises(ValueError):
        RSLSQL(num_demos=-1)


# --- demos, copies, compiled demos ---------------------------------------------------------------


def test_compiled_demos_come_before_retrieved_ones(db, pool, retriever) -> None:
    program = rsl(pool, retriever, **RSLSQL.ABLATIONS["demos"])
    compiled = dspy.Example(
        dialect="sqlite",
        db_schema="CREATE TABLE t (a INTEGER);",
        question="What is the compiled demo?",
        evidence="",
        hints="",
        sql="SELECT a FROM t",
    ).with_inputs("dialect", "db_schema", "question", "evidence", "hints")
    program.preliminary_sql.demos = [compiled]
    _, lm = run(program, [{"sql": OLDER_40}], db)
    messages = lm.history[0]["messages"]
    assert len(messages) == 1 + 2 * 4
    assert "What is the compiled demo?" in messages[0]["content"]
    assert messages[1] == {"role": "assistant", "content": "SELECT a FROM t"}


def test_copies_share_the_pool_but_not_the_predictors(pool, retriever) -> None:
    program = rsl(pool, retriever)
    clone = program.deepcopy()
    source = program.demo_source
    assert clone.demo_source.retriever() is source.retriever() is retriever
    assert clone.demo_source.pool() is source.pool()
    assert clone.preliminary_sql is not program.preliminary_sql
    for copied in (program.reset_copy(), copy.deepcopy(program)):
        assert copied.demo_source.retriever() is retriever
        assert copied.demo_source.pool() is source.pool()


def test_pool_is_loaded_only_when_first_needed() -> None:
    program = programs.get("rsl")
    # Only tokens: the default pool and its retriever are loaded by the first retrieval.
    assert program.demo_source._pool is None and program.demo_source._retriever is None


def test_default_retriever_is_the_masked_question_selector(db, pool) -> None:
    """Built lazily from the pool with the real offline sentence encoder."""
    pytest.importorskip("sentence_transformers")
    program = RSLSQL(pool=pool, **RSLSQL.ABLATIONS["demos"])
    pred, lm = run(
        program,
        [{"sql": "SELECT count(*) FROM singer"}],
        db,
        question="How many singers are there?",
    )
    assert program.demo_source.retriever().name == "masked_question"
    assert len(pred.demos) == 3 and all(q in prompt(lm, 0) for q in pred.demos)
    assert any(q.lower().startswith("how many") for q in pred.demos)


# --- value samples, evidence and descriptions -------------------------------------------------------


def test_random_rows_are_reproducible_and_not_just_the_first(spider_db) -> None:
    car = spider_db("car_1")
    first = random_rows(car, "cars_data", ["Id", "MPG"], 3)
    assert first == random_rows(car, "cars_data", ["Id", "MPG"], 3) and len(first) == 3
    assert first != list(car.execute('SELECT "Id", "MPG" FROM cars_data LIMIT 3').rows)
    small = random_rows(car, "continents", ["ContId"], 50)
    assert len(small) == len(car.execute("SELECT ContId FROM continents").rows)
    assert random_rows(car, "continents", ["ContId"], 0) == []


def test_bird_evidence_columns_and_descriptions(bird_db, pool, retriever) -> None:
    db = bird_db("superhero")
    question = "Please list all the superpowers of 3-D Man."
    evidence = "3-D Man refers to superhero_name = '3-D Man'; superpowers refers to power_name"
    answers = [
        {"columns": '["superhero.superhero_name"]'},
        {"sql": "SELECT superhero_name FROM superhero WHERE superhero_name = '3-D Man'"},
        PARTS,
        {"sql": "SELECT power_name FROM superpower"},
        {"choice": "1"},
    ]
    pred, lm = run(rsl(pool, retriever), answers, db, question=question, evidence=evidence)
    # Columns named in the evidence join the forward list (and SQL1's hints).
    assert "superpower.power_name" in pred.forward_linked
    assert "superpower.power_name" in last_user(lm, 1)
    assert evidence in last_user(lm, 1)
    # Descriptions: only on the simplified schema (step 2 onwards), not on the full one.
    assert " -- " not in last_user(lm, 1)
    assert " -- " in last_user(lm, 3)
    _, lm = run(
        rsl(pool, retriever, descriptions=False), answers, db, question=question, evidence=evidence
    )
    assert " -- " not in last_user(lm, 3)


# --- helpers -------------------------------------------------------------------------------------


def test_component_text_helpers() -> None:
    assert as_items(["a", " ", "- b"]) == ["a", "b"]
    assert as_items("singer.Age > 40\n* WHERE\n") == ["singer.Age > 40", "WHERE"]
    assert as_items(None) == [] and as_items(3) == ["3"]
    assert component_hints({"elements": ["t.a"], "conditions": [], "keywords": ["MIN"]}) == (
        "Elements: t.a\nKeywords: MIN"
    )


def test_postgres_database_runs_the_full_pipeline(spider_root, pool, retriever) -> None:
    url = os.environ.get("SQLWEAVE_PG_URL")
    if not url:
        pytest.skip("SQLWEAVE_PG_URL is not set")
    from sqlweave.transfer import copy_sqlite_to_postgres

    source = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    read = copy_sqlite_to_postgres(source, url, schema_name="test_rsl_concert_singer")
    with Database.open(read, name="concert_singer") as pg:
        answers = [
            {"columns": '["singer.name", "singer.age"]'},
            {"sql": "SELECT name FROM singer WHERE age > 40"},
            PARTS,
            {"sql": "SELECT name FROM singer WHERE age > 30"},
            {"choice": "1"},
        ]
        pred, lm = run(rsl(pool, retriever), answers, pg)
    assert pg.dialect == "postgres" and kinds(lm)[-1] == "select"
    assert (
        "Using valid PostgreSQL" in last_user(lm, 1)
        and pred.sql == "SELECT name FROM singer WHERE age > 40"
    )


# --- stages: every linker, selector and corrector, on the bundled database ----------------------

#: Replies by what the final message asks for (DummyLM's dict mode: first key contained wins),
#: so one script serves every stage combination whatever calls it makes. SQL2 (its hints list
#: elements) returns nothing, so the selectors differ and the execution corrector has work.
STAGE_REPLIES = {
    "-- Feedback": {"corrected_sql": OLDER_30},
    "[[ ## columns ## ]]": LINK,
    "[[ ## keywords ## ]]": PARTS,
    "[[ ## choice ## ]]": {"choice": "2"},
    "-- Elements:": {"sql": EMPTY},
    "answer the following question": {"sql": OLDER_40},
}
ALL_TABLES = ["concert", "singer", "singer_in_concert", "stadium"]


@pytest.fixture()
def bundled_db(tmp_path, demo_concert_db) -> Database:
    """A private copy of the concert_singer database shipped in the package."""
    import shutil

    path = tmp_path / "concert_singer.sqlite"
    shutil.copy(demo_concert_db, path)
    return Database.open(path)


@pytest.fixture()
def tiny_retriever():
    """Two solved questions of another database, retrieved by word overlap (no model)."""
    demos = [
        dspy.Example(
            question=question,
            gold_sql=sql,
            db_id="farm",
            split="train",
            evidence="",
        )
        for question, sql in (
            ("Names of farms older than 10?", "SELECT name FROM farm WHERE age > 10"),
            ("How many cities are there?", "SELECT count(*) FROM city"),
        )
    ]
    return make_retriever("jaccard", demos)


def staged(tiny_retriever, role: str, name: str) -> RSLSQL:
    program = programs.get("rsl", num_demos=2, retriever=tiny_retriever, **{role: name})
    assert program.switches[role] == name
    return program


def run_staged(program: RSLSQL, db: Database) -> dspy.Prediction:
    with dspy.context(lm=DummyLM(STAGE_REPLIES)):
        pred = program(question=QUESTION, db=db)
    for field in stages.CONTRACT:
        assert field in pred, field
    assert pred.sql and pred.candidates == [OLDER_40, EMPTY]
    assert pred.demos == ["Names of farms older than 10?", "How many cities are there?"]
    last = "selector" if program.switches["corrector"] == "none" else "corrector"  # none: a no-op
    assert pred.stages[-1] == last and "generator" in pred.stages
    # Rebuilt from its switches (the artefact path), the program has the same stages.
    rebuilt = programs.get("rsl", **program.switches)
    assert [n for n, _ in rebuilt.named_predictors()] == [n for n, _ in program.named_predictors()]
    return pred


def test_defaults_are_the_papers_stages() -> None:
    program = RSLSQL(num_demos=0)
    assert {r: program.switches[r] for r in stages.ROLES} == {
        "linker": "bidirectional",
        "selector": "lm",
        "corrector": "execution",
    }


@pytest.mark.parametrize("name", stages.available("linker"))
def test_every_linker_runs_in_rsl(bundled_db, tiny_retriever, name: str) -> None:
    pred = run_staged(staged(tiny_retriever, "linker", name), bundled_db)
    forward = name in ("forward", "bidirectional")
    # The forward part is called before SQL1, the linker itself after it (with SQL1 as its
    # draft) unless it reads no draft (forward).
    assert pred.stages.count("linker") == {"none": 0, "bidirectional": 2}.get(name, 1)
    assert bool(pred.forward_linked) == forward
    assert pred.hints[0] == ("Columns likely needed: singer.Age, singer.Name" if forward else "")
    if name == "none":
        assert pred.linked == [] and sorted(pred.simplified_tables) == ALL_TABLES
    else:  # every linker finds singer's columns (from the LM's list or from SQL1)
        assert "singer.Name" in pred.linked or "singer.*" in pred.linked
        assert "singer" in pred.simplified_tables and "concert" not in pred.simplified_tables
    if name == "forward":
        assert pred.linked == pred.forward_linked and pred.backward_linked == []


@pytest.mark.parametrize("name", stages.available("selector"))
def test_every_selector_runs_in_rsl(bundled_db, tiny_retriever, name: str) -> None:
    pred = run_staged(staged(tiny_retriever, "selector", name), bundled_db)
    # The LM picks SQL2 (its empty result), which the execution corrector then repairs; the vote
    # prefers the non-empty answer on a tie and "first" takes SQL1 unexecuted; the runoff asks
    # the LM on that tie (leader first), so it picks SQL2 as the LM selector does.
    asks_lm = name in ("lm", "runoff")
    sql3, choice = (EMPTY, 2) if asks_lm else (OLDER_40, 1)
    assert (pred.sql3, pred.choice) == (sql3, choice) and "selector" in pred.stages
    assert pred.sql == (OLDER_30 if asks_lm else OLDER_40)


@pytest.mark.parametrize("name", stages.available("corrector"))
def test_every_corrector_runs_in_rsl(bundled_db, tiny_retriever, name: str) -> None:
    pred = run_staged(staged(tiny_retriever, "corrector", name), bundled_db)
    assert pred.sql3 == EMPTY  # the LM selection picked SQL2, which returns no rows
    if name == "execution":  # empty counts as a failure: one LM round fixes it
        assert pred.sql == OLDER_30 and pred.correction_rounds == 1
        assert [h["sql"] for h in pred.history] == [EMPTY, OLDER_30]
    elif name in ("none", "rules"):  # nothing to fix without executing (no literal), no call
        assert pred.sql == EMPTY and pred.correction_rounds == 0 and pred.history == []


def test_a_stage_instance_is_used_as_given(bundled_db, tiny_retriever) -> None:
    from sqlweave.programs.stages.linking import DraftTablesLinker

    mine = DraftTablesLinker()
    program = programs.get("rsl", num_demos=2, retriever=tiny_retriever, linker=mine)
    assert program.linker is mine and program.switches["linker"] == "tables"
    pred = run_staged(program, bundled_db)
    assert pred.linked == ["singer.*"] and pred.simplified_tables == ["singer"]


def test_step_switches_still_decide_whether_a_stage_runs(bundled_db, tiny_retriever) -> None:
    program = programs.get(
        "rsl",
        retriever=tiny_retriever,
        linker="values",
        selector="vote",
        corrector="rules",
        **RSLSQL.ABLATIONS["base"],
    )
    assert program.linker is None and program.selector is None and program.corrector is None
    with dspy.context(lm=DummyLM(STAGE_REPLIES)):
        pred = program(question=QUESTION, db=bundled_db)
    assert pred.stages == ["generator"] and pred.sql == OLDER_40 and pred.candidates == [OLDER_40]


def test_schemas_are_cached_per_database_for_every_program(bundled_db) -> None:
    from sqlweave.caches import CACHE

    one, two = RSLSQL(num_demos=0), copy.deepcopy(RSLSQL(num_demos=0))
    assert one.schema_for(bundled_db) is two.schema_for(bundled_db)
    assert one.full_schema_text(bundled_db) is two.full_schema_text(bundled_db)
    other = RSLSQL(num_demos=0, value_samples=0)
    assert other.schema_for(bundled_db) is not one.schema_for(bundled_db)
    CACHE.clear()
    assert one.schema_for(bundled_db) == two.schema_for(bundled_db)
