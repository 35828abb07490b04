"""PET-SQL's control flow on a real Spider database, with DummyLM standing in for the models.

Answers are scripted in call order (PreSQL, the FinSQLs, then the samples). A recording LM keeps
every prompt and the sampling settings of every call, across the copies made for rollouts, so the
tests can count calls per configuration and check what each prompt holds: the optimisation rule,
sampled cell values, foreign keys, retrieved demos, and only the linked tables for FinSQL.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import zlib
from pathlib import Path
from typing import Any

import dspy
import numpy as np
import pytest
from dspy.clients.engines.dummy_engine import AsyncDummyEngine, DummyEngine
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.data import load_spider
from sqlweave.db import Database
from sqlweave.metrics import spider_hardness
from sqlweave.programs import stages
from sqlweave.programs.pet import DEFAULT_HARDNESS_VOTERS, PETSQL
from sqlweave.programs.stages import CONTRACT

QUESTION = "How many singers do we have?"
N_SINGERS = "SELECT count(*) FROM singer"  # 6
N_SINGERS_2 = "SELECT count(Singer_ID) FROM singer"  # 6, written differently
N_STADIUMS = "SELECT count(*) FROM stadium"  # 9
BROKEN = "SELECT count(nme) FROM singer"
ALL_TABLES = (
    "SELECT count(*) FROM singer AS s JOIN singer_in_concert AS sc ON s.Singer_ID = sc.Singer_ID "
    "JOIN concert AS c ON sc.concert_ID = c.concert_ID JOIN stadium AS st "
    "ON c.Stadium_ID = st.Stadium_ID"
)
# Extra hard by Spider's rule (a nested query plus a set operation), predicted from PreSQL.
HARD = (
    "SELECT Name FROM singer WHERE Age > (SELECT avg(Age) FROM singer) "
    "INTERSECT SELECT Name FROM singer WHERE Country = 'France'"
)
OR_MARK = "prefer the one that runs fastest"


class _RecordingEngine(DummyEngine):
    """DummyLM's engine that also logs each call's prompt and sampling settings on its owner."""

    def _complete_messages(self, messages):
        owner = self.owner
        owner.calls.append(
            {
                "lm": owner.label,
                "prompt": json.dumps(messages),
                "last": messages[-1]["content"],
                "n_messages": len(messages),
                "temperature": owner.kwargs.get("temperature"),
                "rollout_id": owner.kwargs.get("rollout_id"),
            }
        )
        return super()._complete_messages(messages)


class RecordingLM(DummyLM):
    """A DummyLM whose copies (rollouts) share its answers and its call log."""

    def __init__(self, answers: Any, label: str = "main") -> None:
        super().__init__(answers)
        self.calls: list[dict[str, Any]] = []
        self.label = label
        self._install()

    def _install(self) -> None:
        self._engine_spec = _RecordingEngine(self)
        self._async_engine_spec = AsyncDummyEngine(self._engine_spec)

    def copy(self, **kwargs):
        copied = super().copy(**kwargs)
        copied._install()
        return copied


class BagOfWords:
    """A cheap deterministic stand-in for the sentence encoder: hashed word counts."""

    dim = 512

    def encode(self, texts, progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().replace("?", " ").replace(".", " ").split():
                out[i, zlib.crc32(word.encode()) % self.dim] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


@pytest.fixture()
def db(spider_db) -> Database:
    return spider_db("concert_singer")


@pytest.fixture(scope="module")
def pool(spider_root: Path) -> list[dspy.Example]:
    # The first train databases (department_management, farm, ...): enough for skeleton matches.
    return load_spider("train", root=spider_root)[:80]


def pet(pool, **switches) -> PETSQL:
    return PETSQL(pool=pool, encoder=BagOfWords(), **switches)


def gen(sql: str) -> dict[str, str]:
    return {"sql": sql}


def run(program: PETSQL, answers: Any, db: Database, **inputs) -> tuple[dspy.Prediction, Any]:
    lm = RecordingLM(answers)
    with dspy.context(lm=lm):
        pred = program(question=inputs.pop("question", QUESTION), db=db, **inputs)
    return pred, lm


# -- the full system --------------------------------------------------------------------------------


def test_registry_builds_pet_with_the_paper_stages_as_predictors() -> None:
    program = programs.get("pet")
    assert isinstance(program, PETSQL)
    assert [name for name, _ in program.named_predictors()] == ["presql", "finsql"]
    assert program.switches["consistency"] == "cross" and program.switches["num_demos"] == 4


def test_full_pipeline_costs_four_calls_and_votes(db: Database, pool) -> None:
    answers = [gen(N_SINGERS), gen(N_STADIUMS), gen(N_SINGERS_2), gen(BROKEN)]
    pred, lm = run(pet(pool), answers, db)
    assert len(lm.calls) == 4
    assert pred.stages == ["demos", "generator", "linker", "generator", "sampler", "selector"]
    assert pred.linked == ["singer.*"] and pred.history == []
    # FinSQL first, then the samples, then PreSQL (ties go to the earliest candidate).
    assert pred.sources == ["finsql[0]", "sample[1]", "sample[2]", "presql"]
    assert pred.candidates == [N_STADIUMS, N_SINGERS_2, BROKEN, N_SINGERS]
    # The wrong FinSQL is outvoted by a sample and PreSQL; the broken sample does not vote.
    assert pred.sql == N_SINGERS_2 and db.execute(pred.sql).rows == ((6,),)
    assert pred.votes == [([0], 1.0), ([1, 3], 2.0)]
    assert pred.vote.support == 2.0 and pred.vote.total == 4.0
    assert pred.presql == N_SINGERS and pred.finsql == N_STADIUMS
    assert pred.linked_tables == ["singer"] and pred.hardness == "easy"
    # The two rollouts ran at the sampling temperature with distinct rollout ids.
    assert [(c["temperature"], c["rollout_id"]) for c in lm.calls[2:]] == [(0.5, 1), (0.5, 2)]
    assert lm.calls[0]["rollout_id"] is None and lm.calls[1]["rollout_id"] is None


def test_presql_prompt_is_the_reference_enhanced_representation(db: Database, pool) -> None:
    pred, lm = run(pet(pool, consistency="none"), [gen(N_SINGERS), gen(N_SINGERS)], db)
    presql = lm.calls[0]["last"]
    assert OR_MARK in presql and QUESTION in presql
    for table in ("concert", "singer", "singer_in_concert", "stadium"):
        assert f"# {table}(" in presql
    # Cell values (CV), column-wise from sampled rows, and foreign keys (FK).
    assert "Name[Joe Sharp,Timbaland,Justin Brown]" in presql
    assert "# singer_in_concert(Singer_ID) REFERENCES singer(Singer_ID);" in presql
    # Retrieved demos are question/SQL pairs in earlier turns, not in the schema.
    assert len(pred.demos) == 4
    whole = lm.calls[0]["prompt"]
    assert all(json.dumps(q)[1:-1] in whole for q in pred.demos)
    assert lm.calls[0]["n_messages"] > 2


def test_masked_question_retrieval_finds_same_intent_questions(db: Database, pool) -> None:
    pred, _ = run(pet(pool, consistency="none", schema_linking=False), [gen(N_SINGERS)], db)
    # "How many singers ..." masks to "how many <mask> ..."; so does "How many farms are there?".
    assert "How many farms are there?" in pred.demos


def test_masked_question_retrieval_with_the_real_encoder(db: Database, pool) -> None:
    pytest.importorskip("sentence_transformers")
    program = PETSQL(pool=pool, consistency="none", schema_linking=False, num_demos=3)
    pred, _ = run(program, [gen(N_SINGERS)], db)
    assert pred.demos[0] == "How many farms are there?"


def test_finsql_sees_only_the_linked_tables(db: Database, pool) -> None:
    pred, lm = run(pet(pool, consistency="none"), [gen(N_SINGERS), gen(N_SINGERS_2)], db)
    assert len(lm.calls) == 2 and pred.sql == N_SINGERS_2 == pred.finsql
    assert pred.stages == ["demos", "generator", "linker", "generator"]
    finsql = lm.calls[1]["last"]
    assert "# singer(" in finsql and "Name[Joe Sharp" in finsql and OR_MARK in finsql
    # Other tables, their values and the foreign keys to them are gone.
    assert "stadium" not in finsql and "singer_in_concert" not in finsql
    assert "REFERENCES" not in finsql
    assert pred.schema.count("# singer(") == 2  # the property line and the value line


def test_linking_keeps_joined_tables_and_their_foreign_keys(db: Database, pool) -> None:
    presql = "SELECT T2.Name FROM singer_in_concert AS T1 JOIN singer AS T2 ON T1.Singer_ID = T2.Singer_ID"
    pred, lm = run(pet(pool, consistency="none"), [gen(presql), gen(presql)], db)
    assert pred.linked_tables == ["singer", "singer_in_concert"]
    finsql = lm.calls[1]["last"]
    assert "# singer_in_concert(Singer_ID) REFERENCES singer(Singer_ID);" in finsql
    assert "concert_ID) REFERENCES concert" not in finsql and "# stadium(" not in finsql


def test_linking_that_keeps_every_table_reuses_presql(db: Database, pool) -> None:
    pred, lm = run(pet(pool, consistency="none"), [gen(ALL_TABLES)], db)
    assert len(lm.calls) == 1
    assert pred.finsql == pred.presql == pred.sql
    assert pred.linked_tables == ["concert", "singer", "singer_in_concert", "stadium"]
    assert pred.stages.count("generator") == 1  # PreSQL only


def test_unparsable_presql_falls_back_to_full_schema_and_votes(db: Database, pool) -> None:
    answers = [gen("I am not sure."), gen(N_SINGERS), gen(N_SINGERS_2)]
    pred, lm = run(pet(pool), answers, db)
    # The greedy FinSQL would see PreSQL's prompt: PreSQL stands in for it, once.
    assert pred.presql == "" and pred.hardness == "extra" and pred.linked_tables == []
    assert pred.sources == ["finsql[0]", "sample[1]", "sample[2]"]
    assert len(lm.calls) == 3
    assert pred.sql == N_SINGERS


def test_evidence_reaches_both_generation_prompts(db: Database, pool) -> None:
    evidence = "a singer is a row of the singer table"
    _, lm = run(
        pet(pool, consistency="none"), [gen(N_SINGERS), gen(N_SINGERS)], db, evidence=evidence
    )
    assert all(evidence in c["last"] for c in lm.calls)


# -- prompt ablations (Table 4) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "absent"),
    [
        ("no_or", OR_MARK),
        ("no_cv", "Name[Joe Sharp"),
        ("no_fk", "REFERENCES"),
    ],
)
def test_prompt_ablations_drop_their_part_only(
    db: Database, pool, config: str, absent: str
) -> None:
    pred, lm = run(pet(pool, **PETSQL.ABLATIONS[config]), [gen(N_SINGERS)], db)
    assert len(lm.calls) == 1 and pred.demos == [] and lm.calls[0]["n_messages"] == 1
    prompt = lm.calls[0]["last"]
    assert absent not in prompt
    for part in (OR_MARK, "Name[Joe Sharp", "REFERENCES"):
        if part != absent:
            assert part in prompt


def test_zero_shot_is_one_call_without_demos(db: Database, pool) -> None:
    pred, lm = run(pet(pool, **PETSQL.ABLATIONS["zero_shot"]), [gen(N_SINGERS)], db)
    assert len(lm.calls) == 1 and pred.stages == ["generator"] and pred.demos == []
    assert pred.sql == N_SINGERS and pred.sources == ["presql"]


# -- linking and consistency (Tables 7 and 8) -------------------------------------------------------


def test_without_linking_presql_is_the_answer(db: Database, pool) -> None:
    pred, lm = run(pet(pool, **PETSQL.ABLATIONS["no_linking"]), [gen(N_SINGERS)], db)
    assert len(lm.calls) == 1 and pred.stages == ["demos", "generator"]
    assert pred.sql == N_SINGERS and pred.linked_tables == []


def test_self_consistency_samples_one_lm_without_presql(db: Database, pool) -> None:
    answers = [
        gen(N_SINGERS),
        gen(N_STADIUMS),
        gen(N_STADIUMS),
        gen(N_SINGERS_2),
        gen(BROKEN),
        gen(N_STADIUMS),
    ]
    pred, lm = run(pet(pool, **PETSQL.ABLATIONS["self_consistency"]), answers, db)
    assert len(lm.calls) == 6
    assert pred.sources == ["finsql[0]", "sample[1]", "sample[2]", "sample[3]", "sample[4]"]
    assert "presql" not in pred.sources
    assert pred.sql == N_STADIUMS and pred.vote.support == 3.0
    assert [c["rollout_id"] for c in lm.calls] == [None, None, 1, 2, 3, 4]


def test_self_consistency_without_linking_reuses_presql_as_the_greedy_sample(
    db: Database, pool
) -> None:
    answers = [gen(N_SINGERS), gen(N_STADIUMS), gen(N_STADIUMS)]
    pred, lm = run(pet(pool, consistency="self", schema_linking=False, samples=2), answers, db)
    assert len(lm.calls) == 3 and pred.candidates == [N_SINGERS, N_STADIUMS, N_STADIUMS]
    assert pred.sql == N_STADIUMS


def test_cross_consistency_over_several_finsql_models(db: Database, pool) -> None:
    model_a = RecordingLM([gen(N_STADIUMS)], label="a")
    model_b = RecordingLM([gen(N_SINGERS_2)], label="b")
    program = pet(pool, finsql_models=[model_a, model_b], samples=0)
    pred, lm = run(program, [gen(N_SINGERS)], db)
    # PreSQL on the current LM, one FinSQL per listed model, on the linked schema.
    assert len(lm.calls) == 1 and len(model_a.calls) == 1 and len(model_b.calls) == 1
    assert pred.sources == ["finsql[0]", "finsql[1]", "presql"]
    assert pred.sql == N_SINGERS_2 and pred.vote.support == 2.0
    assert "stadium" not in model_a.calls[0]["last"]


def test_finsql_model_specs_are_built_once(db: Database, pool, monkeypatch) -> None:
    import sqlweave.lm

    built: list[str] = []
    other = RecordingLM({QUESTION: gen(N_SINGERS_2)}, label="other")

    def fake_build_lm(spec: str, **_: Any):
        built.append(spec)
        return other

    monkeypatch.setattr(sqlweave.lm, "build_lm", fake_build_lm)
    # A spec no other test uses: built LMs are kept process-wide (sqlweave.caches.CACHE).
    spec = "local:pet-built-once-0.5b"
    program = pet(pool, finsql_models=[spec], samples=1)
    lm = RecordingLM({QUESTION: gen(N_SINGERS)})
    with dspy.context(lm=lm):
        for _ in range(2):
            pred = copy.deepcopy(program)(question=QUESTION, db=db)
    assert built == [spec]
    # Samples roll out the first FinSQL model, not the current LM.
    assert len(lm.calls) == 2 and len(other.calls) == 4
    assert [c["rollout_id"] for c in other.calls] == [None, 1, None, 1]
    assert pred.sources == ["finsql[0]", "sample[1]", "presql"]


# -- fine-grained voting ----------------------------------------------------------------------------


def test_fine_grained_voting_skips_samples_on_easy_presql(db: Database, pool) -> None:
    pred, lm = run(
        pet(pool, **PETSQL.ABLATIONS["fine_grained"]), [gen(N_SINGERS), gen(N_STADIUMS)], db
    )
    assert pred.hardness == "easy" == spider_hardness(N_SINGERS)
    assert len(lm.calls) == 2 and pred.sources == ["finsql[0]", "presql"]
    # A 1-1 tie goes to the earliest candidate: the linked FinSQL.
    assert pred.sql == N_STADIUMS


def test_fine_grained_voting_lets_everyone_vote_on_hard_presql(db: Database, pool) -> None:
    assert spider_hardness(HARD) in ("hard", "extra")
    answers = [gen(HARD), gen(N_SINGERS), gen(N_SINGERS_2), gen(N_STADIUMS)]
    pred, lm = run(pet(pool, hardness_weighting=True), answers, db)
    assert pred.hardness == spider_hardness(HARD)
    assert len(lm.calls) == 4 and pred.sources == ["finsql[0]", "sample[1]", "sample[2]", "presql"]
    assert pred.sql == N_SINGERS


def test_custom_hardness_voters(db: Database, pool) -> None:
    voters = {**DEFAULT_HARDNESS_VOTERS, "easy": ["presql"]}
    pred, lm = run(pet(pool, hardness_weighting=True, hardness_voters=voters), [gen(N_SINGERS)], db)
    assert len(lm.calls) == 1 and pred.sources == ["presql"]
    assert pred.sql == N_SINGERS
    with pytest.raises(ValueError, match="unknown grades"):
        PETSQL(hardness_voters={"trivial": ["presql"]})


def test_without_weighting_hardness_is_reported_but_not_used(db: Database, pool) -> None:
    answers = [gen(N_SINGERS), gen(N_SINGERS), gen(N_SINGERS), gen(N_SINGERS)]
    pred, _ = run(pet(pool), answers, db)
    assert pred.hardness == "easy" and len(pred.sources) == 4


# -- every ablation, switches, artefacts --------------------------------------------------------------

EXPECTED_CALLS = {
    "full": 4,
    "zero_shot": 1,
    "no_or": 1,
    "no_cv": 1,
    "no_fk": 1,
    "no_linking": 1,
    "single": 2,
    "self_consistency": 6,  # PreSQL (for linking) + greedy FinSQL + 4 samples
    "fine_grained": 2,
}


def test_ablation_table_is_covered() -> None:
    assert set(PETSQL.ABLATIONS) == set(EXPECTED_CALLS)


@pytest.mark.parametrize("config", sorted(PETSQL.ABLATIONS))
def test_every_ablation_runs(db: Database, pool, config: str) -> None:
    program = pet(pool, **PETSQL.ABLATIONS[config])
    pred, lm = run(program, {QUESTION: gen(N_SINGERS)}, db)
    assert pred.sql == N_SINGERS and db.execute(pred.sql).rows == ((6,),)
    assert len(lm.calls) == EXPECTED_CALLS[config]
    assert set(CONTRACT) <= set(pred.keys())


@pytest.mark.parametrize(
    "switches",
    [{"consistency": "majority"}, {"num_demos": -1}, {"samples": -2}, {"values_per_column": 0}],
)
def test_bad_switches_are_rejected(switches: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PETSQL(**switches)


def test_compiled_demos_combine_with_retrieved_ones(db: Database, pool) -> None:
    program = pet(pool, consistency="none", num_demos=2)
    compiled = dspy.Example(
        dialect="sqlite", db_schema="", question="List every compiled thing.", evidence="",
        sql="SELECT name FROM thing",
    ).with_inputs("dialect", "db_schema", "question", "evidence")  # fmt: skip
    program.finsql.demos = [compiled]
    pred, lm = run(program, [gen(N_SINGERS), gen(N_SINGERS)], db)
    assert "List every compiled thing." not in lm.calls[0]["prompt"]
    assert "List every compiled thing." in lm.calls[1]["prompt"]
    assert all(json.dumps(q)[1:-1] in lm.calls[1]["prompt"] for q in pred.demos)


def test_copies_share_pool_retriever_encoder_and_lms_and_switches_rebuild(pool) -> None:
    model = RecordingLM([gen(N_SINGERS)], label="object")
    program = pet(pool, samples=3, finsql_models=["local:x", model])
    clone = copy.deepcopy(program)
    assert "__deepcopy__" not in vars(PETSQL)
    assert clone.demo_source.pool() is program.demo_source.pool()
    assert clone.demo_source.retriever() is program.demo_source.retriever()
    from sqlweave.programs.pet import _finsql_lm

    # An LM object is kept by token: the copy reaches the very same LM.
    assert _finsql_lm(clone.finsql_models[1]) is model
    # Only specs are switches (an LM object is not saved), so a rebuild needs no object.
    assert program.switches["finsql_models"] == ["local:x"]
    assert program.switches["linker"] == "tables" and program.switches["selector"] == "vote"
    assert program.switches["corrector"] == "none"
    rebuilt = programs.get("pet", **program.switches)
    assert rebuilt.switches == program.switches and rebuilt.samples == 3
    json.dumps(program.switches)  # artefacts store switches as JSON


def test_artifact_round_trip(tmp_path: Path) -> None:
    from sqlweave.optimizers import ArtifactMeta, load_program, save_program

    program = PETSQL(**PETSQL.ABLATIONS["self_consistency"])
    demo = dspy.Example(dialect="sqlite", db_schema="", question="q", evidence="", sql="SELECT 1")
    program.presql.demos = [demo]
    path = save_program(
        program, tmp_path / "pet.json", ArtifactMeta(program="pet", switches=program.switches)
    )
    loaded, meta = load_program(path)
    assert isinstance(loaded, PETSQL) and loaded.consistency == "self" and loaded.samples == 4
    assert loaded.presql.demos[0]["sql"] == "SELECT 1" and loaded.finsql.demos == []


def test_calls_are_counted_by_the_usage_tracker(db: Database, pool) -> None:
    from sqlweave.lm import track_usage

    answers = [gen(N_SINGERS), gen(N_STADIUMS), gen(N_SINGERS_2), gen(BROKEN)]
    lm = RecordingLM(answers)
    with dspy.context(lm=lm), track_usage() as usage:
        pred = pet(pool)(question=QUESTION, db=db)
    assert usage.calls == 4 == len(lm.calls) and "lm_calls" not in pred.keys()


# -- every stage of every role (issue 14), on the bundled database ----------------------------------

STAGE_QUESTIONS = (
    "What are the names of singers from France?",
    "How many concerts are there?",
    "Show the name and capacity of every stadium.",
)
STAGE_POOL = [
    dspy.Example(question=q, gold_sql=sql, db_id=f"train_{i}", split="train", evidence="")
    for i, (q, sql) in enumerate(
        [
            ("How many cars are there?", "SELECT count(*) FROM cars"),
            ("What are the names of drivers from Italy?", "SELECT name FROM driver WHERE c = 'x'"),
            ("Show the name and size of every farm.", "SELECT name, size FROM farm"),
        ]
    )
]


@pytest.fixture()
def concert(tmp_path: Path, demo_concert_db: Path) -> Database:
    # A copy: tests never write to the bundled file.
    target = tmp_path / "concert_singer.sqlite"
    shutil.copy(demo_concert_db, target)
    return Database.open(target)


def staged(**switches: Any) -> PETSQL:
    return PETSQL(pool=STAGE_POOL, retriever="jaccard", num_demos=2, **switches)


def run_questions(program: PETSQL, db: Database) -> list[dspy.Prediction]:
    """Each bundled question with the prompt-fixture LM (answers from the prompt alone; one
    draft in three is broken, so correctors have work)."""
    from record_prompts import ScriptedLM

    out = []
    for question in STAGE_QUESTIONS:
        with dspy.context(lm=ScriptedLM()):
            pred = program(question=question, db=db)
        assert_contract(pred)
        out.append(pred)
    return out


def assert_contract(pred: dspy.Prediction) -> None:
    assert set(CONTRACT) <= set(pred.keys())
    assert isinstance(pred.sql, str) and pred.sql
    assert all(isinstance(x, str) for x in pred.stages) and pred.stages[:2] == [
        "demos",
        "generator",
    ]
    assert pred.candidates and all(isinstance(c, str) for c in pred.candidates)
    assert all(isinstance(name, str) and "." in name for name in pred.linked)
    assert len(pred.demos) == 2 and all(isinstance(q, str) for q in pred.demos)
    assert all(isinstance(h, dict) and "sql" in h for h in pred.history)


@pytest.mark.parametrize("name", stages.available("linker"))
def test_every_linker(concert: Database, name: str) -> None:
    program = staged(linker=name)
    assert program.switches["linker"] == name
    for pred in run_questions(program, concert):
        assert ("linker" in pred.stages) == (name != "none")
        if name == "none":
            assert pred.linked == [] and pred.linked_tables == []
        if not pred.linked:  # an empty link keeps the whole schema
            assert pred.schema.count("REFERENCES") == 3


@pytest.mark.parametrize("name", stages.available("selector"))
def test_every_selector(concert: Database, name: str) -> None:
    program = staged(selector=name)
    for pred in run_questions(program, concert):
        assert pred.stages[-1] == "selector"
        assert pred.sql in pred.candidates and len(pred.candidates) == len(pred.sources) == 4
        assert (pred.vote is not None) == (
            name in ("vote", "runoff", "across", "ranked", "grounded")
        )  # runoff votes first; ranked scores the vote's classes; grounded votes among the kept


@pytest.mark.parametrize("name", stages.available("corrector"))
def test_every_corrector(concert: Database, name: str) -> None:
    program = staged(corrector=name)
    preds = run_questions(program, concert)
    for pred in preds:
        assert ("corrector" in pred.stages) == (name != "none")
        if name == "none":
            assert pred.history == [] and pred.sql in pred.candidates
    if name == "execution":
        # The fixture LM's broken drafts fail to run and are sent back with their error.
        assert any(h["feedback"] for pred in preds for h in pred.history)


def test_a_pipeline_no_paper_has(concert: Database) -> None:
    program = programs.get(
        "pet", linker="bidirectional", selector="lm", corrector="rules", num_demos=0
    )
    assert [n for n, _ in program.named_predictors()] == [
        "presql",
        "finsql",
        "linker.forward_linker.link",
        "selector.select",
    ]
    from record_prompts import ScriptedLM

    with dspy.context(lm=ScriptedLM()):
        pred = program(question=STAGE_QUESTIONS[0], db=concert)
    assert pred.stages[:3] == ["generator", "linker", "generator"] and pred.linked
    assert pred.stages[-2:] == ["selector", "corrector"]


def test_a_column_link_keeps_its_columns_and_the_keys(concert: Database) -> None:
    presql = "SELECT Name FROM singer WHERE Country = 'France'"
    program = staged(linker="columns", consistency="none")
    pred, lm = run(program, [gen(presql), gen(presql)], concert)
    assert {"singer.Name", "singer.Country"} <= set(pred.linked)
    finsql = lm.calls[1]["last"]
    assert "# singer(Singer_ID, Name, Country);" in finsql and "Age" not in finsql
    assert pred.linked_tables == ["singer", "stadium"]  # stadium has a Name column too


def test_a_stage_instance_is_used_as_given(concert: Database) -> None:
    from sqlweave.programs.stages.voting import VoteSelector

    class LastSelector(dspy.Module):
        def forward(self, candidates, **_: Any) -> dspy.Prediction:
            return dspy.Prediction(sql=candidates[-1], choice=len(candidates), lm_called=False)

    program = staged(selector=LastSelector())
    assert program.switches["selector"] is None  # a user's class has no registry name
    pred, _ = run(program, {QUESTION: gen(N_SINGERS)}, concert, question=QUESTION)
    assert pred.sql == pred.candidates[-1] and pred.sources[-1] == "presql"
    assert staged(selector=VoteSelector()).switches["selector"] == "vote"


@pytest.mark.postgres
@pytest.mark.skipif(not os.environ.get("SQLWEAVE_PG_URL"), reason="SQLWEAVE_PG_URL not set")
def test_runs_on_postgres(spider_root: Path, pool) -> None:
    from sqlweave.transfer import copy_sqlite_to_postgres

    sqlite_path = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    url = copy_sqlite_to_postgres(sqlite_path, os.environ["SQLWEAVE_PG_URL"])
    db = Database.open(url)
    answers = [gen("SELECT count(*) FROM singer"), gen("SELECT count(*) FROM singer")]
    pred, lm = run(pet(pool, consistency="none"), answers, db)
    assert db.dialect == "postgres" and "PostgreSQL" in lm.calls[0]["last"]
    assert pred.linked_tables == ["singer"] and db.execute(pred.sql).rows == ((6,),)
