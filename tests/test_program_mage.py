"""MageSQL wiring on real Spider/BIRD databases with DummyLM: which stages run, how many calls,
what each prompt holds, and that every ablation row builds and answers."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

import dspy
import pytest
from conftest import spy_rollouts
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.data import load_spider
from sqlweave.db import Database
from sqlweave.optimizers import ArtifactMeta, load_program, save_program
from sqlweave.programs import stages as stage_registry
from sqlweave.programs.mage import (
    DRAFT_STRATEGIES,
    HardnessRetriever,
    MageCorrector,
    MageSQL,
    choose_guidelines,
    guideline_feedback,
)

EASY = "SELECT count(*) FROM singer"
HARD = "SELECT name FROM singer WHERE age > 40 EXCEPT SELECT name FROM singer WHERE age > 50"
HARD_FIXED = "SELECT name FROM singer WHERE age > 40 AND age <= 50"
# Hard (a set operator) and fixable by the string-format rule ('france' is stored as 'France').
HARD_RULE = (
    "SELECT name FROM singer WHERE country = 'france' "
    "INTERSECT SELECT name FROM singer WHERE age > 30"
)
QUESTION = "How many singers do we have?"


@pytest.fixture(scope="module")
def pool(spider_root: Path) -> list[dspy.Example]:
    """A small train pool with counts, joins, ordering and set operators in it."""
    train = load_spider("train", root=spider_root)
    picked = train[:60]
    picked += [ex for ex in train[60:600] if " EXCEPT " in ex.gold_sql.upper()][:6]
    picked += [ex for ex in train[60:600] if " INTERSECT " in ex.gold_sql.upper()][:6]
    return picked


@pytest.fixture()
def db(spider_db):
    return spider_db("concert_singer")


def messages(lm: DummyLM, i: int) -> str:
    return json.dumps(lm.history[i]["messages"])


def user_turn(lm: DummyLM, i: int) -> str:
    return lm.history[i]["messages"][-1]["content"]


def run(program: MageSQL, answers: list[dict[str, str]], db: Any, **kwargs: Any):
    lm = DummyLM(answers)
    with dspy.context(lm=lm):
        pred = program(question=kwargs.pop("question", QUESTION), db=db, **kwargs)
    return pred, lm


# --- control flow of the full program ----------------------------------------------------------------


def test_structure_strategy_drafts_then_generates_with_demos(pool, db) -> None:
    program = MageSQL(strategy="pqgram", pool=pool)
    pred, lm = run(program, [{"sql": EASY}, {"sql": EASY}], db)
    assert len(lm.history) == 2  # draft + generation; easy, no rule fired: no correction
    assert pred.stages == ["generator", "demos", "generator", "corrector"]
    assert pred.sql == EASY and pred.draft_sql == EASY and pred.hard_case is False
    # The draft is zero-shot: DDL schema and question, no demos, no database content.
    draft_msgs = lm.history[0]["messages"]
    assert [msg["role"] for msg in draft_msgs] == ["user"]
    draft = user_turn(lm, 0)
    assert "CREATE TABLE" in draft and "singer_in_concert" in draft and QUESTION in draft
    assert "France" not in messages(lm, 0)  # sample values are never shown
    # The few-shot call shows the k retrieved pairs, chosen by the draft's structure (counts).
    assert len(pred.demos) == 4
    assert all(sql.lower().startswith("select count(") for sql in pred.demo_sql)
    gen = messages(lm, 1)
    for question, sql in zip(pred.demos, pred.demo_sql, strict=True):
        assert question in gen and sql in gen
    assert len(lm.history[1]["messages"]) == 1 + 2 * 4  # 4 demo pairs, then the question
    # Best demo last, nearest the question.
    assert pred.demos[0] in json.dumps(lm.history[1]["messages"][-3])


def test_the_draft_steers_the_demos(pool, db) -> None:
    program = MageSQL(strategy="pqgram", pool=pool)
    counts, _ = run(program, [{"sql": EASY}, {"sql": EASY}], db)
    sets, _ = run(program, [{"sql": HARD}, {"sql": EASY}], db)
    assert counts.demos != sets.demos
    assert any(" EXCEPT " in sql.upper() or " INTERSECT " in sql.upper() for sql in sets.demo_sql)


@pytest.mark.parametrize("strategy", ["random", "jaccard"])
def test_question_strategies_skip_the_draft_call(pool, db, strategy: str) -> None:
    program = MageSQL(strategy=strategy, pool=pool)
    pred, lm = run(program, [{"sql": EASY}], db)
    assert len(lm.history) == 1 and pred.draft_sql == ""
    assert pred.stages == ["demos", "generator", "corrector"]
    assert len(pred.demos) == 4
    assert pred.demos[0] in messages(lm, 0)


def test_zero_shot_is_one_call_without_demos(pool, db) -> None:
    program = MageSQL(strategy="none", pool=pool)
    pred, lm = run(program, [{"sql": EASY}], db)
    assert len(lm.history) == 1 and len(lm.history[0]["messages"]) == 1
    assert pred.demos == [] and pred.stages == ["generator", "corrector"]


def test_hard_case_without_rule_gets_one_guided_correction(pool, db) -> None:
    program = MageSQL(strategy="jaccard", pool=pool)
    question = "Names of singers older than 40 but not older than 50?"
    pred, lm = run(program, [{"sql": HARD}, {"corrected_sql": HARD_FIXED}], db, question=question)
    assert len(lm.history) == 2
    assert pred.stages == ["demos", "generator", "corrector"] and pred.guidelines
    assert pred.rules_fired == [] and pred.hard_case is True
    assert pred.generated_sql == HARD and pred.sql == HARD_FIXED
    assert "set_operator" in pred.guidelines
    correction = user_turn(lm, 1)
    assert HARD in correction and "CREATE TABLE" in correction and question in correction
    assert "INTERSECT" in correction and "not executed" in correction
    assert len(lm.history[1]["messages"]) == 1  # zero-shot: no demos in the correction prompt
    assert db.execute(pred.sql).rows


def test_a_fired_rule_skips_the_prompt_correction(pool, db) -> None:
    program = MageSQL(strategy="jaccard", pool=pool)
    pred, lm = run(program, [{"sql": HARD_RULE}], db)
    assert len(lm.history) == 1
    assert pred.rules_fired == ["fix_string_format"] and "'France'" in pred.sql
    assert pred.hard_case is None and not pred.guidelines


def test_rule_switch_off_leaves_the_literal_and_asks_the_lm(pool, db) -> None:
    program = MageSQL(strategy="jaccard", pool=pool, rule_correction=False)
    pred, lm = run(program, [{"sql": HARD_RULE}, {"corrected_sql": HARD_RULE}], db)
    assert len(lm.history) == 2 and pred.guidelines
    assert "'france'" in pred.sql and pred.rules_fired == []


def test_prompt_switch_off_never_calls_the_corrector(pool, db) -> None:
    program = MageSQL(strategy="jaccard", pool=pool, prompt_correction=False)
    pred, lm = run(program, [{"sql": HARD}], db)
    assert len(lm.history) == 1 and pred.sql == HARD and pred.hard_case is None


def test_no_correction_returns_the_generated_sql(pool, db) -> None:
    program = MageSQL(**MageSQL.ABLATIONS["no_correction"], strategy="jaccard", pool=pool)
    pred, lm = run(program, [{"sql": HARD_RULE}], db)
    assert len(lm.history) == 1 and pred.sql == HARD_RULE
    assert pred.stages == ["demos", "generator"]  # the corrector did nothing


def test_empty_generation_falls_back_to_the_draft(pool, db) -> None:
    program = MageSQL(strategy="pqgram", pool=pool, prompt_correction=False)
    pred, lm = run(program, [{"sql": EASY}, {"sql": "I cannot help."}], db)
    assert len(lm.history) == 2 and pred.generated_sql == EASY and pred.sql == EASY


def test_samples_are_voted_with_the_generation_and_the_draft(pool, db) -> None:
    # the greedy few-shot SQL fails; two samples at temperature run; the vote picks a sample
    program = MageSQL(strategy="pqgram", pool=pool, samples=3, selector="vote")
    lm = DummyLM([{"sql": EASY}, {"sql": "SELECT nope FROM singer"}, {"sql": EASY}, {"sql": EASY}])
    sampled = spy_rollouts(lm)  # the samples run on copies of the LM (their own history)
    with dspy.context(lm=lm):
        pred = program(question=QUESTION, db=db)
    assert len(lm.history) == 2  # the draft and the greedy generation
    assert sampled == [(0, 0.7), (1, 0.7)]  # two distinct rollouts at the temperature
    assert pred.stages == ["generator", "demos", "generator", "sampler", "selector", "corrector"]
    assert pred.candidates == ["SELECT nope FROM singer", EASY, EASY, EASY]  # the draft last
    assert pred.sql == EASY and pred.generated_sql == EASY


def test_samples_need_a_selector_that_chooses(pool) -> None:
    with pytest.raises(ValueError, match="needs a selector"):
        MageSQL(samples=3, pool=pool)
    with pytest.raises(ValueError, match="samples must be an integer"):
        MageSQL(samples=0, selector="vote", pool=pool)
    assert MageSQL(pool=pool).switches["samples"] == 1  # the paper's single generation


def test_bird_evidence_reaches_every_prompt(bird_db, pool) -> None:
    db = bird_db("superhero")
    evidence = "heavy refers to weight_kg > 100"
    program = MageSQL(strategy="pqgram", pool=pool)
    sql = "SELECT COUNT(*) FROM superhero WHERE weight_kg > 100"
    pred, lm = run(
        program,
        [{"sql": sql}, {"sql": sql}],
        db,
        question="How many heavy heroes?",
        evidence=evidence,
    )
    assert len(lm.history) == 2
    assert evidence in user_turn(lm, 0) and evidence in user_turn(lm, 1)
    assert 'CREATE TABLE "superhero" (' in user_turn(lm, 1)


def test_compiled_and_retrieved_demos_are_combined(pool, db) -> None:
    program = MageSQL(strategy="jaccard", pool=pool, num_demos=2)
    program.generate.demos = [
        dspy.Example(
            dialect="sqlite",
            db_schema="",
            question="Compiled demo question?",
            evidence="",
            sql="SELECT 1",
        )
    ]
    pred, lm = run(program, [{"sql": EASY}], db)
    text = messages(lm, 0)
    assert "Compiled demo question?" in text
    assert all(q in text for q in pred.demos) and len(pred.demos) == 2
    assert len(lm.history[0]["messages"]) == 1 + 2 * 3  # 1 compiled + 2 retrieved demo pairs
    assert len(program.generate.demos) == 1  # retrieved demos are per call only


def test_demo_schema_switch_shows_each_demo_ddl(pool, db) -> None:
    program = MageSQL(strategy="jaccard", pool=pool, num_demos=1, demo_schema=True)
    pred, lm = run(program, [{"sql": EASY}], db)
    demo, answer = lm.history[0]["messages"][:2]
    assert demo["role"] == "user" and answer["role"] == "assistant"
    assert "CREATE TABLE" in demo["content"] and "singer_in_concert" not in demo["content"]
    assert pred.demos[0] in demo["content"]


# --- strategies, caches, guidelines ----------------------------------------------------------------


def test_hardness_prefers_the_drafts_level(pool) -> None:
    retriever = HardnessRetriever(pool)
    probe = {"question": "x", "db_id": "nowhere", "draft_sql": HARD}
    found = retriever.retrieve(probe, 5)
    assert found and all(ex.difficulty in ("hard", "extra") for ex in found)
    levels = {ex.difficulty for ex in found}
    assert len(levels) == 1
    easy = retriever.retrieve({**probe, "draft_sql": EASY}, 5)
    assert all(ex.difficulty == "easy" for ex in easy)
    assert retriever.retrieve(probe, 5) == found  # deterministic per question


def test_draft_strategies_are_exactly_the_sql_structure_ones() -> None:
    assert DRAFT_STRATEGIES == {"hardness", "skeleton", "pqgram", "graph"}
    assert MageSQL(strategy="pqgram", num_demos=0).uses_draft is False
    with pytest.raises(ValueError, match="unknown strategy"):
        MageSQL(strategy="hardness_oracle")


def test_caches_are_built_once_and_shared_by_copies(pool, db) -> None:
    program = MageSQL(strategy="jaccard", pool=pool)
    run(program, [{"sql": HARD_RULE}], db)
    retriever = program.demo_source.retriever()
    schema = program.schema_text(db)
    run(program, [{"sql": HARD_RULE}], db)
    assert program.demo_source.retriever() is retriever and program.schema_text(db) is schema
    clone = copy.deepcopy(program)
    assert clone.demo_source.retriever() is retriever
    assert clone.demo_source.pool() is program.demo_source.pool()
    assert clone.schema_text(db) is schema
    assert clone.generate is not program.generate


def test_the_hardness_retriever_is_built_once_per_pool(pool) -> None:
    program = MageSQL(strategy="hardness", pool=pool)
    retriever = program.demo_source.retriever()
    assert isinstance(retriever, HardnessRetriever)
    assert copy.deepcopy(program).demo_source.retriever() is retriever


def test_predictors_are_named_after_the_stages() -> None:
    names = {name for name, _ in MageSQL(strategy="none").named_predictors()}
    assert names == {"draft", "generate", "corrector.correct"}


@pytest.mark.parametrize(
    ("question", "sql", "expected"),
    [
        (
            "What are the names of singers?",
            "SELECT T1.name FROM singer AS T1 JOIN singer_in_concert AS T2 "
            "ON T1.singer_id = T2.singer_id",
            ["join"],
        ),
        (
            "Which concerts have singers?",
            "SELECT T1.concert_name, T2.name FROM concert AS T1 JOIN singer_in_concert AS S "
            "ON T1.concert_id = S.concert_id JOIN singer AS T2 ON S.singer_id = T2.singer_id",
            ["join"],
        ),
        ("Who is the oldest singer?", "SELECT name FROM singer ORDER BY age LIMIT 1", ["order"]),
        ("List the different countries.", "SELECT country FROM singer", ["distinct"]),
        ("List the different countries.", "SELECT DISTINCT country FROM singer", ["columns"]),
        ("Singers who never performed?", "SELECT name FROM singer", ["set_operator"]),
        ("Singer names?", "SELECT name FROM singer", ["columns"]),
    ],
)
def test_choose_guidelines(question: str, sql: str, expected: list[str]) -> None:
    assert choose_guidelines(question, sql) == expected


def test_guideline_feedback_lists_only_the_chosen() -> None:
    text = guideline_feedback(["distinct"])
    assert "DISTINCT" in text and "JOIN" not in text


# --- the ablation table, the registry and artefacts ------------------------------------------------


def _graph_retriever(pool: list[dspy.Example]) -> Any:
    """An untrained GNN over the pool: enough to check the wiring, not the ranking quality."""
    from sqlweave.gnn.model import GNNConfig, GraphContrastiveModel
    from sqlweave.gnn.retriever import GraphRetriever

    return GraphRetriever(pool, model=GraphContrastiveModel.from_config(GNNConfig()))


GRAPH_AVAILABLE = importlib.util.find_spec("sqlweave.gnn.retriever") is not None


@pytest.mark.parametrize("config", sorted(MageSQL.ABLATIONS))
def test_every_ablation_builds_and_answers(pool, db, config: str) -> None:
    switches = MageSQL.ABLATIONS[config]
    strategy = switches.get("strategy", "graph")
    extra: dict[str, Any] = {}
    if strategy == "graph":
        if not GRAPH_AVAILABLE:
            pytest.skip("sqlweave.gnn.retriever is not importable yet")
        extra["retriever"] = _graph_retriever(pool)
    program = MageSQL(**switches, pool=pool, **extra)
    assert isinstance(programs.get("mage", **switches), MageSQL)
    uses_draft = strategy in DRAFT_STRATEGIES
    answers = [{"sql": HARD}] * (1 + uses_draft) + [{"corrected_sql": HARD_FIXED}]
    pred, lm = run(program, answers, db)
    corrects = program.prompt_correction
    assert len(lm.history) == int(uses_draft) + 1 + int(corrects)
    assert pred.sql == (HARD_FIXED if corrects else HARD)
    assert (pred.stages.count("generator") == 2) == uses_draft
    assert len(pred.demos) == (0 if strategy == "none" else program.num_demos)


def test_graph_without_a_draft_answers_zero_shot(pool, db) -> None:
    if not GRAPH_AVAILABLE:
        pytest.skip("sqlweave.gnn.retriever is not importable yet")
    program = MageSQL(pool=pool, retriever=_graph_retriever(pool), prompt_correction=False)
    pred, lm = run(program, [{"sql": "no idea"}, {"sql": EASY}], db)
    assert len(lm.history) == 2 and pred.demos == [] and pred.sql == EASY


def test_artifact_rebuilds_with_its_switches(tmp_path: Path) -> None:
    program = programs.get("mage", **MageSQL.ABLATIONS["struct_tree"], num_demos=3)
    program.generate.demos = [
        dspy.Example(dialect="sqlite", db_schema="", question="q", evidence="", sql="SELECT 1")
    ]
    path = save_program(
        program,
        tmp_path / "mage.json",
        ArtifactMeta(program="mage", switches=program.switches, lm="x"),
    )
    loaded, meta = load_program(path)
    assert isinstance(loaded, MageSQL) and meta.switches["strategy"] == "pqgram"
    assert loaded.strategy == "pqgram" and loaded.num_demos == 3
    assert loaded.generate.demos[0]["sql"] == "SELECT 1"


@pytest.mark.skipif(not os.environ.get("SQLWEAVE_PG_URL"), reason="SQLWEAVE_PG_URL not set")
def test_runs_on_postgres(pool, spider_root: Path) -> None:
    from sqlweave.db import Database
    from sqlweave.transfer import copy_sqlite_to_postgres

    src = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    url = copy_sqlite_to_postgres(src, os.environ["SQLWEAVE_PG_URL"], schema_name="mage_test")
    db = Database.open(url, name="concert_singer")
    assert db.dialect == "postgres"
    sql = "SELECT COUNT(*) FROM singer"
    pred, lm = run(MageSQL(strategy="pqgram", pool=pool), [{"sql": sql}, {"sql": sql}], db)
    assert len(lm.history) == 2 and "postgres" in messages(lm, 0).lower()
    assert db.execute(pred.sql).rows[0][0] == 6


# --- stages: every linker, selector and corrector on the bundled database ---------------------------

LINKED = {"columns": '["singer.Name"]'}
FIXED = {"corrected_sql": HARD_FIXED}
BUNDLED_QUESTION = "How many singers do we have?"


@pytest.fixture(scope="module")
def bundled_pool(demo_concert_db: Path) -> list[dspy.Example]:
    """The train split of the demo bundle shipped in the package (no benchmark data needed)."""
    return load_spider("train", root=demo_concert_db.parents[3])


@pytest.fixture()
def concert(tmp_path: Path, demo_concert_db: Path) -> Database:
    copied = tmp_path / "concert_singer.sqlite"
    shutil.copy(demo_concert_db, copied)
    return Database.open(copied)


def run_stage(
    bundled_pool: list[dspy.Example], db: Database, answers: list[dict[str, str]], **stage: Any
):
    """The draft-reading configuration (pqgram) with one stage replaced, on the bundled question."""
    program = programs.get("mage", strategy="pqgram", pool=bundled_pool, **stage)
    pred, lm = run(program, answers, db, question=BUNDLED_QUESTION)
    assert set(stage_registry.CONTRACT) <= set(pred.keys())
    assert len(pred.demos) == 4 and all(isinstance(q, str) for q in pred.demos)
    assert pred.draft_sql == HARD and pred.candidates[-1] == HARD  # the draft is a candidate
    for role, name in stage.items():
        assert program.switches[role] == name
    return pred, lm


@pytest.mark.parametrize("linker", stage_registry.available("linker"))
def test_every_linker(bundled_pool, concert: Database, linker: str) -> None:
    asks = linker in ("forward", "bidirectional")
    answers = [{"sql": HARD}, *([LINKED] if asks else []), {"sql": HARD}, FIXED]
    pred, lm = run_stage(bundled_pool, concert, answers, linker=linker)
    linking = ["linker"] if linker != "none" else []
    assert pred.stages == ["generator", "demos", *linking, "generator", "corrector"]
    assert len(lm.history) == len(answers)
    full = MageSQL(strategy="none").schema_text(concert)
    if linker == "none":
        assert pred.linked == [] and pred.schema == full
    else:
        # Every linker finds singer (the draft reads it; the LM names singer.Name): the
        # generation sees a pruned schema, and the draft, made before linking, the whole one.
        assert any(name.startswith("singer.") for name in pred.linked)
        assert 'CREATE TABLE "singer"' in pred.schema and len(pred.schema) < len(full)
        assert 'CREATE TABLE "stadium"' in user_turn(lm, 0)
    generation = 2 if asks else 1
    assert len(lm.history[generation]["messages"]) == 1 + 2 * 4  # the few-shot call
    assert pred.schema in user_turn(lm, generation)
    assert pred.sql == HARD_FIXED  # the mage corrector fixed the hard generation


@pytest.mark.parametrize("selector", stage_registry.available("selector"))
def test_every_selector(bundled_pool, concert: Database, selector: str) -> None:
    # The draft is HARD, the generation EASY: two candidates with different answers.
    answers = [
        {"sql": HARD},
        {"sql": EASY},
        *([{"choice": "1"}] if selector in ("lm", "runoff") else []),
    ]
    pred, lm = run_stage(bundled_pool, concert, answers, selector=selector)
    assert pred.candidates == [EASY, HARD]
    assert pred.generated_sql in pred.candidates
    assert ("selector" in pred.stages) == (selector != "first")
    # "first" takes the generation, "vote" the earliest of a tie, "lm" the choice 1; all EASY,
    # which needs no correction call.
    assert pred.generated_sql == EASY and pred.sql == EASY
    assert len(lm.history) == len(answers)


@pytest.mark.parametrize("corrector", stage_registry.available("corrector"))
def test_every_corrector(bundled_pool, concert: Database, corrector: str) -> None:
    pred, lm = run_stage(
        bundled_pool, concert, [{"sql": HARD}, {"sql": HARD}, FIXED], corrector=corrector
    )
    assert pred.generated_sql == HARD and pred.stages[:3] == ["generator", "demos", "generator"]
    expected = {
        "none": (HARD, [], 2),
        "execution": (HARD, ["corrector"], 2),  # HARD runs: nothing to fix
        "rules": (HARD, ["corrector"], 2),  # no rule fires on HARD
        "mage": (HARD_FIXED, ["corrector"], 3),  # hard, no rule fired: one guided call
        "joins": (HARD, ["corrector"], 2),  # HARD runs: no join to complete
        "intersect": (HARD, ["corrector"], 2),  # no "both" to split
        "rules_intersect": (HARD, ["corrector"], 2),  # no rule fires, no "both" to split
    }[corrector]
    assert (pred.sql, pred.stages[3:], len(lm.history)) == expected
    assert (pred.history != []) == (corrector == "mage" or corrector == "execution")
    assert concert.execute(pred.sql).rows


def test_the_mage_corrector_alone_follows_the_protocol(concert: Database) -> None:
    question = "Names of singers older than 40 but not older than 50?"
    lm = DummyLM([{"corrected_sql": HARD_FIXED}])
    with dspy.context(lm=lm):
        out = stage_registry.build("corrector", "mage")(sql=HARD, db=concert, question=question)
    assert (out.sql, out.rounds, out.stages) == (HARD_FIXED, 1, ["rules", "correct"])
    assert out.hard_case is True and "set_operator" in out.guidelines
    assert out.history == [{"sql": HARD, "feedback": guideline_feedback(out.guidelines)}]
    assert "CREATE TABLE" in user_turn(lm, 0)  # the full DDL without a db_schema
    fired = MageCorrector(prompt_correction=False)(sql=HARD_RULE, db=concert)
    assert fired.fired == ["fix_string_format"] and fired.hard_case is None and not lm.history[1:]


def test_stage_instances_are_used_as_given(pool, db) -> None:
    from sqlweave.programs.stages.correction import RuleCorrector

    mine = RuleCorrector()
    program = MageSQL(strategy="jaccard", pool=pool, corrector=mine)
    assert program.corrector is mine and program.switches["corrector"] == "rules"
    switches = MageSQL().switches
    assert (switches["linker"], switches["selector"], switches["corrector"]) == (
        "none",
        "first",
        "mage",
    )
    with pytest.raises(ValueError, match="unknown linker"):
        MageSQL(linker="magic")
