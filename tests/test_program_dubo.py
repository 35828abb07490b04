"""Dubo-SQL v1 and v2 on real Spider/BIRD databases, with DummyLM standing in for the model.

What is checked is the paper's control flow and prompt content: v1's DDL without primary keys but
with foreign keys and CSV sample rows, its single retry; v2's per-column schema lines, diverse
retrieval (one demo per database, never the question's own), demos as chat turns, JSON answers,
the correction loop; and that every ablation row builds and runs.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import zlib
from pathlib import Path

import dspy
import numpy as np
import pytest
from conftest import spy_rollouts
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.db import Database
from sqlweave.programs import stages
from sqlweave.programs.dubo import DuboV1, DuboV2, estimate_tokens

QUESTION = "How many singers are there?"
GOOD = "SELECT count(*) FROM singer"
BAD = "SELECT count(*) FROM singers"
WORSE = "SELECT count(nme) FROM singer"


class BagOfWords:
    """A cheap deterministic stand-in for the sentence encoder: hashed word counts."""

    dim = 512

    def encode(self, texts, progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().replace("?", " ").replace(".", " ").split():
                out[i, zlib.crc32(word.encode()) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-9)


@pytest.fixture()
def db(spider_db) -> Database:
    return spider_db("concert_singer")


@pytest.fixture(scope="module")
def pool(spider_root: Path) -> list[dspy.Example]:
    def ex(db_id: str, question: str, sql: str) -> dspy.Example:
        path = spider_root / "database" / db_id / f"{db_id}.sqlite"
        if not path.is_file():
            pytest.skip(f"Spider database {db_id} not bundled")
        return dspy.Example(
            question=question,
            db_id=db_id,
            evidence="",
            db_path=str(path),
            gold_sql=sql,
            split="train",
        ).with_inputs("question", "db_id", "evidence", "db_path")

    return [
        ex("musical", "How many singers are there?", "SELECT count(*) FROM actor"),
        ex("musical", "Count how many singers there are.", "SELECT count(*) FROM actor AS a"),
        ex("farm", "How many farms are there?", "SELECT count(*) FROM farm"),
        ex("book_2", "How many books are there?", "SELECT count(*) FROM book"),
        ex(
            "entrepreneur", "How many entrepreneurs are there?", "SELECT count(*) FROM entrepreneur"
        ),
        ex(
            "department_management",
            "List the name, born state and age of the heads of departments ordered by age.",
            "SELECT name, born_state, age FROM head ORDER BY age",
        ),
        # Nearly the question itself, but from the question's own database: never shown.
        ex("concert_singer", "How many singers are there in the database?", GOOD),
    ]


def v2(pool, **switches) -> DuboV2:
    return DuboV2(pool=pool, encoder=BagOfWords(), **switches)


def json_lm(answers: list[dict[str, str]]) -> DummyLM:
    return DummyLM(answers, adapter=dspy.JSONAdapter())


def messages(lm: DummyLM, call: int = -1) -> list[dict[str, str]]:
    return lm.history[call]["messages"]


def last_user(lm: DummyLM, call: int = -1) -> str:
    return messages(lm, call)[-1]["content"]


# --- registry ---------------------------------------------------------------------------------------


def test_registry_names() -> None:
    assert isinstance(programs.get("dubo_v1"), DuboV1)
    assert isinstance(programs.get("dubo_v2"), DuboV2)
    assert isinstance(programs.get("dubo"), DuboV2)
    assert programs.get("dubo_v1", retry_on_error=False).switches["retry_on_error"] is False


def test_predictors_are_named_after_the_stages() -> None:
    both = ["generate", "corrector.correct"]
    assert [n for n, _ in DuboV1().named_predictors()] == both
    assert [n for n, _ in DuboV1(retry_on_error=False).named_predictors()] == both[:1]
    assert [n for n, _ in DuboV2().named_predictors()] == both
    assert [n for n, _ in DuboV2(error_correction=False).named_predictors()] == both[:1]


def test_bad_switches_are_refused() -> None:
    with pytest.raises(ValueError, match="sample_rows"):
        DuboV1(sample_rows=-1)
    with pytest.raises(ValueError, match="demo_schema"):
        DuboV2(demo_schema="some")
    with pytest.raises(ValueError, match="pool_source"):
        DuboV2(pool_source="wikisql")


# --- v1 ---------------------------------------------------------------------------------------------


def test_v1_prompt_is_ddl_with_csv_rows_fks_and_no_primary_keys(db: Database) -> None:
    lm = DummyLM([{"sql": GOOD}])
    with dspy.context(lm=lm):
        pred = DuboV1()(question=QUESTION, db=db, evidence="singers are people who sing")
    assert pred.sql == GOOD and len(lm.history) == 1
    assert pred.stages == ["generator", "corrector"]  # the execution check found nothing to fix
    prompt = last_user(lm)
    assert QUESTION in prompt and "singers are people who sing" in prompt
    assert 'CREATE TABLE "singer" ("Singer_ID" INTEGER, "Name" TEXT' in prompt
    assert "PRIMARY KEY" not in prompt  # the paper removes keys and constraints...
    assert 'FOREIGN KEY ("Singer_ID") REFERENCES "singer" ("Singer_ID")' in prompt  # ...not FKs
    # up to 5 sample rows per table as CSV with a header line
    assert "5 example rows from table singer:" in prompt
    assert "Singer_ID,Name,Country,Song_Name" in prompt
    assert pred.sample_rows == 5 and pred.correction_rounds == 0


def test_v1_sample_rows_switch_and_token_budget(db: Database) -> None:
    program = DuboV1(sample_rows=2)
    text, rows = program.schema_text(db)
    assert rows == 2 and "2 example rows from table singer:" in text
    full, _ = DuboV1(max_schema_tokens=0).schema_text(db)
    bare, rows = DuboV1(sample_rows=0).schema_text(db)
    assert rows == 0 and "example rows" not in bare
    # a budget between the bare schema and the full one drops rows, not tables
    budget = (estimate_tokens(full) + estimate_tokens(bare)) // 2
    text, rows = DuboV1(max_schema_tokens=budget).schema_text(db)
    assert 0 < rows < 5 and estimate_tokens(text) <= budget
    assert text.count("CREATE TABLE") == bare.count("CREATE TABLE") == 4
    # a budget nothing fits: the whole schema without rows
    text, rows = DuboV1(max_schema_tokens=10).schema_text(db)
    assert rows == 0 and text == bare


def test_v1_retries_once_with_the_error(db: Database) -> None:
    lm = DummyLM([{"sql": BAD}, {"corrected_sql": GOOD}])
    with dspy.context(lm=lm):
        pred = DuboV1()(question=QUESTION, db=db)
    assert pred.draft_sql == BAD and pred.sql == GOOD
    assert len(lm.history) == 2 and pred.correction_rounds == 1
    retry_prompt = last_user(lm)
    assert BAD in retry_prompt and "no such table" in retry_prompt.lower()
    assert 'CREATE TABLE "singer" (' in retry_prompt  # the same schema as the first call
    assert "5 example rows from table singer:" in retry_prompt


def test_v1_retries_at_most_once(db: Database) -> None:
    lm = DummyLM([{"sql": BAD}, {"corrected_sql": WORSE}, {"corrected_sql": GOOD}])
    with dspy.context(lm=lm):
        pred = DuboV1()(question=QUESTION, db=db)
    assert len(lm.history) == 2 and pred.correction_rounds == 1
    assert pred.sql == BAD  # nothing ran: the first answer stands


def test_v1_without_retry_makes_one_call(db: Database) -> None:
    lm = DummyLM([{"sql": BAD}, {"corrected_sql": GOOD}])
    with dspy.context(lm=lm):
        pred = DuboV1(retry_on_error=False)(question=QUESTION, db=db)
    assert pred.sql == BAD and len(lm.history) == 1 and pred.stages == ["generator"]


def test_v1_no_call_for_retry_when_sql_runs(db: Database) -> None:
    lm = DummyLM([{"sql": f"```sql\n{GOOD};\n```"}])
    with dspy.context(lm=lm):
        pred = DuboV1()(question=QUESTION, db=db)
    assert pred.sql == GOOD and len(lm.history) == 1


def test_v1_samples_are_voted_with_the_draft_and_its_correction(db: Database) -> None:
    # greedy draft fails; two samples at temperature; the retry cannot fix the draft
    lm = DummyLM([{"sql": BAD}, {"sql": GOOD}, {"sql": GOOD}, {"corrected_sql": WORSE}])
    sampled = spy_rollouts(lm)  # the samples run on copies of the LM (their own history)
    with dspy.context(lm=lm):
        pred = DuboV1(samples=3, selector="vote")(question=QUESTION, db=db)
    assert len(lm.history) == 2  # the greedy draft and its retry
    assert sampled == [(0, 0.7), (1, 0.7)]  # two distinct rollouts at the temperature
    assert pred.stages == ["generator", "sampler", "corrector", "selector"]
    assert pred.draft_sql == BAD and pred.candidates == [BAD, GOOD]
    assert pred.sql == GOOD  # the only candidate that runs wins the execution vote


def test_v1_samples_need_a_selector_that_chooses() -> None:
    with pytest.raises(ValueError, match="needs a selector"):
        DuboV1(samples=3)
    with pytest.raises(ValueError, match="samples must be an integer"):
        DuboV1(samples=0, selector="vote")
    assert DuboV1(samples=1).switches["samples"] == 1  # the paper's one call is the default


# --- v2: prompt and retrieval ------------------------------------------------------------------------


def test_v2_full_prompt_demos_as_turns_and_json(db: Database, pool) -> None:
    lm = json_lm([{"sql": GOOD}])
    with dspy.context(lm=lm):
        pred = v2(pool)(question=QUESTION, db=db, evidence="")
    assert pred.sql == GOOD and len(lm.history) == 1
    assert pred.stages == ["demos", "generator", "corrector"]
    msgs = messages(lm)
    # system, then 4 demos as user/assistant pairs, then the question
    assert [m["role"] for m in msgs] == ["system"] + ["user", "assistant"] * 4 + ["user"]
    assert "JSON" in msgs[-1]["content"]
    # the schema: one line per column with example values
    assert "singer.Name (TEXT). Example values: 'Joe Sharp', 'Timbaland'" in msgs[-1]["content"]
    assert "singer_in_concert.Singer_ID = singer.Singer_ID" in msgs[-1]["content"]  # FKs
    assert QUESTION in msgs[-1]["content"]
    # diverse: four databases, none of them the question's own
    assert len(set(pred.demo_db_ids)) == 4 and "concert_singer" not in pred.demo_db_ids
    # the most similar demo sits right before the question
    assert pred.demos[-1] == "How many singers are there?"
    assert pred.demo_db_ids[-1] == "musical"
    assert QUESTION in msgs[-3]["content"] and "musical" not in msgs[-1]["content"]
    # demos answer in the same format as the model: JSON holding the gold SQL
    assert json.loads(msgs[-2]["content"]) == {"sql": "SELECT count(*) FROM actor"}
    # each demo shows its own schema in the same per-column format (tables its SQL uses)
    assert "actor.Name (" in msgs[-3]["content"] and "musical.Name" not in msgs[-3]["content"]


def test_v2_non_diverse_retrieval_repeats_databases(db: Database, pool) -> None:
    lm = json_lm([{"sql": GOOD}])
    with dspy.context(lm=lm):
        pred = v2(pool, diverse=False)(question=QUESTION, db=db)
    assert pred.demo_db_ids.count("musical") == 2
    assert "concert_singer" not in pred.demo_db_ids  # own database still never shown


def test_v2_num_demos_and_demo_schema_switches(db: Database, pool) -> None:
    lm = json_lm([{"sql": GOOD}, {"sql": GOOD}, {"sql": GOOD}])
    with dspy.context(lm=lm):
        pred = v2(pool, num_demos=0)(question=QUESTION, db=db)
        assert pred.demos == [] and len(messages(lm)) == 2
        v2(pool, num_demos=1, demo_schema="none")(question=QUESTION, db=db)
        demo_user = messages(lm)[1]["content"]
        assert "How many singers are there?" in demo_user and "actor." not in demo_user
        v2(pool, num_demos=1, demo_schema="full")(question=QUESTION, db=db)
        demo_user = messages(lm)[1]["content"]
        assert "actor.Name (" in demo_user and "musical.Name (" in demo_user


def test_v2_compiled_demos_combine_with_retrieved(db: Database, pool) -> None:
    program = v2(pool, num_demos=2)
    program.generate.demos = [
        dspy.Example(
            dialect="sqlite",
            db_schema="t.a (int).",
            question="What is compiled?",
            evidence="",
            sql="SELECT a FROM t",
        )
    ]
    lm = json_lm([{"sql": GOOD}])
    with dspy.context(lm=lm):
        program(question=QUESTION, db=db)
    msgs = messages(lm)
    assert len(msgs) == 1 + 2 * 3 + 1
    assert "What is compiled?" in msgs[1]["content"]
    assert len(program.generate.demos) == 1  # retrieved demos are per call only


def test_v2_without_json_uses_the_configured_adapter(db: Database, pool) -> None:
    lm = DummyLM([{"sql": GOOD}])
    with dspy.context(lm=lm):
        pred = v2(pool, json_output=False)(question=QUESTION, db=db)
    assert pred.sql == GOOD
    msgs = messages(lm)
    # sqlweave's default SQLAdapter: no system message, 4 demos as user/assistant pairs whose
    # answers are bare SQL, then the question; no JSON asked for anywhere
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 4 + ["user"]
    assert msgs[1]["content"].startswith("SELECT count(*)")
    assert msgs[-2]["content"] == "SELECT count(*) FROM actor"
    assert not any("JSON" in m["content"] for m in msgs)


def test_v2_bird_prompt_has_descriptions_and_evidence(bird_db, pool) -> None:
    db = bird_db("superhero")
    evidence = "blue eyes refers to colour = 'Blue'"
    sql = "SELECT count(*) FROM superhero"
    lm = json_lm([{"sql": sql}])
    with dspy.context(lm=lm):
        pred = v2(pool)(question="How many superheroes have blue eyes?", db=db, evidence=evidence)
    prompt = last_user(lm)
    assert evidence in prompt and "superhero.superhero_name (" in prompt
    assert "Example values:" in prompt and pred.sql == sql
    # BIRD column descriptions appear on the column lines
    assert any(
        line.startswith("superhero.eye_colour_id") and ": " in line for line in prompt.splitlines()
    )


# --- v2: error correction --------------------------------------------------------------------------


def test_v2_correction_loop_runs_until_the_sql_runs(db: Database, pool) -> None:
    lm = json_lm([{"sql": BAD}, {"corrected_sql": WORSE}, {"corrected_sql": GOOD}])
    with dspy.context(lm=lm):
        pred = v2(pool)(question=QUESTION, db=db)
    assert pred.draft_sql == BAD and pred.sql == GOOD
    assert len(lm.history) == 3 and pred.correction_rounds == 2
    assert "Singer_ID" in last_user(lm) and "no such column" in last_user(lm).lower()
    assert json.loads(lm.history[-1]["outputs"][0]) == {"corrected_sql": GOOD}


def test_v2_correction_rounds_cap(db: Database, pool) -> None:
    lm = json_lm([{"sql": BAD}] + [{"corrected_sql": WORSE}] * 5)
    with dspy.context(lm=lm):
        pred = v2(pool, correction_rounds=2)(question=QUESTION, db=db)
    assert len(lm.history) == 3 and pred.correction_rounds == 2 and pred.sql == BAD


def test_v2_without_error_correction_makes_one_call(db: Database, pool) -> None:
    lm = json_lm([{"sql": BAD}, {"corrected_sql": GOOD}])
    with dspy.context(lm=lm):
        pred = v2(pool, error_correction=False)(question=QUESTION, db=db)
    assert pred.sql == BAD and len(lm.history) == 1 and pred.correction_rounds == 0


# --- ablations, copies, artefacts -------------------------------------------------------------------


@pytest.mark.parametrize("config", sorted(DuboV1.ABLATIONS))
def test_v1_every_ablation_runs(db: Database, config: str) -> None:
    program = programs.get("dubo_v1", **DuboV1.ABLATIONS[config])
    lm = DummyLM([{"sql": BAD}, {"corrected_sql": GOOD}])
    with dspy.context(lm=lm):
        pred = program(question=QUESTION, db=db)
    expected_calls = 2 if program.retry_on_error else 1
    assert len(lm.history) == expected_calls and pred.sql in (GOOD, BAD)


@pytest.mark.parametrize("config", sorted(DuboV2.ABLATIONS))
def test_v2_every_ablation_runs(db: Database, pool, config: str) -> None:
    switches = DuboV2.ABLATIONS[config]
    program = v2(pool, **switches)
    answers = [{"sql": BAD}, {"corrected_sql": GOOD}]
    lm = json_lm(answers) if program.json_output else DummyLM(answers)
    with dspy.context(lm=lm):
        pred = program(question=QUESTION, db=db)
    assert len(lm.history) == (2 if program.error_correction else 1)
    assert pred.sql == (GOOD if program.error_correction else BAD)
    assert len(pred.demos) == 4
    assert (len(set(pred.demo_db_ids)) == 4) is program.diverse


def test_ablation_tables_mirror_the_paper() -> None:
    assert set(DuboV2.ABLATIONS) == {
        "full",
        "no_error_correction",
        "no_json",
        "non_diverse_retrieval",
    }
    assert set(DuboV1.ABLATIONS) == {"full", "no_retry"}
    assert DuboV2.ABLATIONS["full"] == {} and DuboV1.ABLATIONS["full"] == {}


def test_copies_share_the_pool_and_retriever(db: Database, pool) -> None:
    program = v2(pool)
    lm = json_lm([{"sql": GOOD}, {"sql": GOOD}])
    with dspy.context(lm=lm):
        program(question=QUESTION, db=db)
        twin = program.deepcopy()
        fresh = program.reset_copy()
        plain = copy.deepcopy(program)
        source = program.demo_source
        for other in (twin, fresh, plain):
            # The pool, the encoder and the retriever are held as cache tokens: shared, not copied.
            assert other.demo_source.pool() is source.pool()
            assert other.demo_source.retriever() is source.retriever()
        assert twin.generate is not program.generate
        twin(question=QUESTION, db=db)
    assert all(isinstance(t, str) for t in (source._pool, source._encoder))


def test_v2_artifact_round_trip(tmp_path: Path) -> None:
    from sqlweave.optimizers import ArtifactMeta, load_program, save_program

    program = programs.get("dubo_v2", diverse=False, correction_rounds=1)
    program.generate.demos = [
        dspy.Example(dialect="sqlite", db_schema="", question="q", evidence="", sql="SELECT 1")
    ]
    meta = ArtifactMeta(program="dubo_v2", lm="local:x", switches=program.switches)
    loaded, _ = load_program(save_program(program, tmp_path / "dubo.json", meta))
    assert isinstance(loaded, DuboV2) or isinstance(getattr(loaded, "program", None), DuboV2)
    inner = loaded if isinstance(loaded, DuboV2) else loaded.program
    assert inner.diverse is False and inner.correction_rounds == 1
    assert inner.generate.demos[0]["sql"] == "SELECT 1"


# --- stages: every linker, selector and corrector (issue 14) -----------------------------------------

#: A bundled question whose draft the scripted LM breaks, so correction and selection have work.
STAGE_QUESTION = "What is the average, minimum, and maximum age of all singers from France?"
ROLE_CHOICES = [
    (program, role, name)
    for program in ("dubo_v1", "dubo_v2")
    for role, names in stages.available().items()
    for name in names
]


@pytest.fixture()
def bundled_db(tmp_path: Path, demo_concert_db: Path) -> Database:
    target = tmp_path / "concert_singer.sqlite"
    shutil.copy(demo_concert_db, target)
    return Database.open(target)


@pytest.fixture(scope="module")
def bundled_pool(demo_concert_db: Path) -> list[dspy.Example]:
    """A small train pool over the databases of the demo bundle (no ../shared/data needed)."""
    root = demo_concert_db.parents[1]
    rows = [
        ("musical", "How many musicals are there?", "SELECT count(*) FROM musical"),
        ("singer", "How many singers are there?", "SELECT count(*) FROM singer"),
        ("book_2", "How many books are there?", "SELECT count(*) FROM book"),
        ("entrepreneur", "What is the average height of people?", "SELECT avg(Height) FROM people"),
        ("poker_player", "What is the maximum earnings?", "SELECT max(Earnings) FROM poker_player"),
    ]
    return [
        dspy.Example(
            question=question,
            db_id=db_id,
            evidence="",
            db_path=str(root / db_id / f"{db_id}.sqlite"),
            gold_sql=sql,
            split="train",
        ).with_inputs("question", "db_id", "evidence", "db_path")
        for db_id, question, sql in rows
    ]


def test_roles_default_to_the_papers_choice() -> None:
    for program in (DuboV1(), DuboV2()):
        assert {r: program.switches[r] for r in stages.ROLES} == {
            "linker": "none",
            "selector": "first",
            "corrector": "execution",
        }
    assert DuboV1().corrector.max_rounds == 1 and DuboV1().corrector.multi_turn
    assert DuboV2(correction_rounds=5).corrector.max_rounds == 5
    assert not hasattr(DuboV1(retry_on_error=False), "corrector")


@pytest.mark.parametrize(
    ("program", "role", "name"), ROLE_CHOICES, ids=[f"{p}-{r}={n}" for p, r, n in ROLE_CHOICES]
)
def test_every_stage_of_every_role_runs(
    bundled_db: Database, bundled_pool, program: str, role: str, name: str
) -> None:
    from record_prompts import ScriptedLM

    extra = {"pool": bundled_pool, "encoder": BagOfWords()} if program == "dubo_v2" else {}
    module = programs.get(program, **{role: name}, **extra)
    assert module.switches[role] == name
    lm = ScriptedLM()
    with dspy.context(lm=lm):
        pred = module(question=STAGE_QUESTION, db=bundled_db)
    assert set(stages.CONTRACT) <= set(pred.keys())
    assert all(isinstance(pred[field], list) for field in stages.CONTRACT[1:])
    assert pred.sql and "generator" in pred.stages and lm.calls
    if program == "dubo_v2":
        assert pred.stages[0] == "demos" and len(pred.demos) == 4
        assert "concert_singer" not in pred.demo_db_ids
    if role == "linker":
        assert ("linker" in pred.stages) == (name != "none")
        if name != "none":
            assert pred.stages.index("linker") == pred.stages.index("generator") - 1
    if role == "selector":
        assert ("selector" in pred.stages) == (name != "first")
        if name != "first":
            # the corrected query first, then the draft it came from
            assert len(pred.candidates) == 2 and pred.sql in pred.candidates
            assert pred.candidates[-1] == pred.draft_sql
    if role == "corrector":
        assert ("corrector" in pred.stages) == (name != "none")
    if (role, name) == ("corrector", "execution"):
        assert pred.history and pred.correction_rounds == 1


def test_a_linker_prunes_the_schema_before_generation(bundled_db: Database) -> None:
    lm = DummyLM([{"sql": GOOD}])
    with dspy.context(lm=lm):
        pred = DuboV1(linker="values")(question=STAGE_QUESTION, db=bundled_db)
    assert pred.stages == ["linker", "generator", "corrector"]
    assert "singer.Country" in pred.linked
    prompt = last_user(lm)
    assert 'CREATE TABLE "singer"' in prompt and 'CREATE TABLE "stadium"' not in prompt
    assert pred.schema in prompt


# --- PostgreSQL (optional) ---------------------------------------------------------------------------


@pytest.mark.postgres
def test_both_versions_on_postgres(spider_root: Path, pool) -> None:
    url = os.environ.get("SQLWEAVE_PG_URL")
    if not url:
        pytest.skip("SQLWEAVE_PG_URL is not set")
    from sqlweave.transfer import copy_sqlite_to_postgres

    source = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    pg_url = copy_sqlite_to_postgres(source, url, schema_name="test_dubo_concert_singer")
    with Database.open(pg_url, name="concert_singer") as pg:
        lm = DummyLM([{"sql": "SELECT count(*) FROM singers"}, {"corrected_sql": GOOD}])
        with dspy.context(lm=lm):
            pred = DuboV1()(question=QUESTION, db=pg)
        assert pred.sql == GOOD and "Using valid PostgreSQL" in last_user(lm)
        lm = json_lm([{"sql": GOOD}])
        with dspy.context(lm=lm):
            pred = v2(pool)(question=QUESTION, db=pg)
        assert pred.sql == GOOD and pg.execute(pred.sql).rows == ((6,),)
