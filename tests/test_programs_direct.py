"""Wiring of the zero-shot baseline and of saved artefacts, with DummyLM (no real model)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.db import Database
from sqlweave.optimizers import ArtifactError, ArtifactMeta, load_program, save_program


@pytest.fixture()
def db(tmp_path: Path, demo_concert_db: Path) -> Database:
    copy = tmp_path / "concert_singer.sqlite"
    shutil.copy(demo_concert_db, copy)
    return Database.open(copy)


def test_direct_prompt_holds_schema_and_question(db: Database) -> None:
    lm = DummyLM([{"sql": "```sql\nSELECT count(*) FROM singer;\n```"}])
    with dspy.context(lm=lm):
        pred = programs.get("direct")(question="How many singers are there?", db=db)
    assert pred.sql == "SELECT count(*) FROM singer"
    prompt = json.dumps(lm.history[-1]["messages"])
    assert "How many singers are there?" in prompt
    assert "CREATE TABLE" in prompt and "singer_in_concert" in prompt
    assert db.execute(pred.sql).rows == ((6,),)


def test_direct_accepts_db_path_like_benchmark_examples(db: Database) -> None:
    lm = DummyLM([{"sql": "SELECT name FROM stadium"}])
    with dspy.context(lm=lm):
        pred = programs.get("direct")(question="Stadium names?", db_path=str(db.path), evidence="")
    assert pred.sql == "SELECT name FROM stadium"


def test_garbage_output_gives_empty_sql_not_a_crash(db: Database) -> None:
    lm = DummyLM([{"sql": "I do not know."}])
    with dspy.context(lm=lm):
        pred = programs.get("direct")(question="?", db=db)
    assert pred.sql == ""


def test_unknown_program_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown program 'nope'"):
        programs.get("nope")


def test_artifact_round_trip_keeps_demos(tmp_path: Path) -> None:
    program = programs.get("direct")
    demo = dspy.Example(
        dialect="sqlite",
        db_schema="CREATE TABLE t(a)",
        question="q",
        evidence="",
        sql="SELECT a FROM t",
    )
    program.generate.demos = [demo]
    path = save_program(
        program, tmp_path / "p.json", ArtifactMeta(program="direct", lm="local:x", val_ex_pct=50.0)
    )
    loaded, meta = load_program(path)
    assert meta.val_ex == 0.5 and meta.lm == "local:x"
    assert loaded.generate.demos[0]["sql"] == "SELECT a FROM t"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "invalid JSON"),
        ('{"format": "something-else"}', "not a sqlweave program file"),
        ('{"format": "sqlweave-program", "format_version": 99}', "format version 99"),
        (
            '{"format": "sqlweave-program", "format_version": 1, "meta": {"program": "nope"}, "state": {}}',
            "corrupted or incompatible",
        ),
    ],
)
def test_bad_artifacts_give_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ArtifactError, match=message):
        load_program(path)


def test_missing_artifact(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="not found"):
        load_program(tmp_path / "absent.json")


def test_direct_samples_vote_and_correct_as_stages(db: Database) -> None:
    answers = [
        {"sql": "SELECT count(*) FROM singers"},  # greedy: fails
        {"sql": "SELECT count(*) FROM singer"},
        {"sql": "SELECT COUNT(*) FROM singer"},
    ]
    with dspy.context(lm=DummyLM(answers)):
        pred = programs.get("direct", samples=3, corrector="execution")(
            question="How many singers are there?", db=db
        )
    assert pred.sql == "SELECT count(*) FROM singer"  # the two that run agree
    assert pred.candidates == [a["sql"] for a in answers]
    assert pred.stages == ["generator", "sampler", "selector", "corrector"] and pred.history


@pytest.mark.parametrize("linker", ["tables", "columns", "values", "forward", "bidirectional"])
def test_direct_with_a_linker_prunes_the_schema(db: Database, linker: str) -> None:
    answers = [{"sql": "SELECT Name FROM singer"}]
    if linker in ("forward", "bidirectional"):
        answers.insert(0, {"columns": '["singer.Name"]'})
    with dspy.context(lm=DummyLM(answers)):
        pred = programs.get("direct", linker=linker)(
            question="Names of singers from France?", db=db
        )
    assert pred.stages[0] == "linker" and pred.sql == "SELECT Name FROM singer"
    if linker in ("forward", "bidirectional", "values"):
        assert "singer" in " ".join(pred.linked)
        assert 'CREATE TABLE "stadium"' not in pred.schema  # pruned to the linked tables
    assert programs.get("direct", linker=linker).switches["linker"] == linker


def test_direct_rejects_bad_stage_switches() -> None:
    with pytest.raises(ValueError, match="unknown corrector"):
        programs.get("direct", corrector="magic")
    with pytest.raises(ValueError, match="samples"):
        programs.get("direct", samples=0)


def test_direct_chat_layout_sends_a_question_line_not_a_script(db: Database) -> None:
    lm = DummyLM([{"sql": "SELECT count(*) FROM singer"}])
    with dspy.context(lm=lm):
        pred = programs.get("direct", prompt_layout="chat")(question="How many singers?", db=db)
    assert pred.sql == "SELECT count(*) FROM singer"
    messages = lm.history[-1]["messages"]
    assert messages[0]["role"] == "system" and "SQLite" in messages[0]["content"]
    user = messages[1]["content"]
    assert user.startswith("CREATE TABLE") and user.endswith("Question: How many singers?")
    assert "-- Using valid" not in user
    # the default is the chat layout; the SQL-script layout is the other choice
    default = DummyLM([{"sql": "SELECT 1"}])
    with dspy.context(lm=default):
        programs.get("direct")(question="How many singers?", db=db)
    assert default.history[-1]["messages"] == messages
    plain = DummyLM([{"sql": "SELECT 1"}])
    with dspy.context(lm=plain):
        programs.get("direct", prompt_layout="script")(question="How many singers?", db=db)
    script = plain.history[-1]["messages"]
    assert script[0]["role"] == "user" and "-- Using valid SQLite" in script[0]["content"]
    with pytest.raises(ValueError, match="prompt_layout"):
        programs.get("direct", prompt_layout="prose")


def test_direct_prefill_switch_reaches_the_adapter(db: Database) -> None:
    from sqlweave.cli import parse_switches

    assert parse_switches(["prefill=false"]) == {"prefill": False}
    prog = programs.get("direct", prefill=False)
    assert prog.switches["prefill"] is False and prog.generate.prefill is False
    assert programs.get("direct").generate.prefill is False  # the default since stop 32
    assert programs.get("direct", prefill=True).generate.prefill == "auto"
    lm = DummyLM([{"sql": "SELECT 1"}])
    with dspy.context(lm=lm):
        prog(question="How many singers?", db=db)
    # DummyLM is not the local engine, so no prefill either way; the prompt is unchanged
    assert lm.history[-1]["messages"][-1]["role"] == "user"
