"""Plain inputs (issue 39): sqlweave.Example and dicts as train sets, one error naming every
missing field before any optimizer runs; the one validation policy of sqlweave.compile; an
artefact that DSPy's own Module.load reads; format-1 artefacts (EX as a fraction) still read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

import sqlweave
from sqlweave import programs
from sqlweave.api import default_validation
from sqlweave.data import DataError, load_spider
from sqlweave.examples import as_examples
from sqlweave.optimizers.artifact import load_program


@pytest.fixture()
def db_file(tmp_path: Path, demo_concert_db: Path) -> Path:
    return Path(shutil.copy(demo_concert_db, tmp_path / "concert.sqlite"))


def test_example_fills_every_field(db_file: Path) -> None:
    ex = sqlweave.Example(
        question="How many singers?", sql="SELECT count(*) FROM singer", db=db_file
    )
    assert isinstance(ex, dspy.Example)
    assert ex.gold_sql == "SELECT count(*) FROM singer" and ex.db_path == str(db_file)
    assert ex.db_id == "concert" and ex.evidence == "" and ex.difficulty == "easy"
    assert ex.source == "user" and ex.question_id == "q0"
    assert set(ex.inputs().keys()) == {"question", "db_id", "evidence", "db_path"}


def test_one_error_names_every_missing_field(db_file: Path) -> None:
    items = [
        dspy.Example(question="How many?"),  # what a hand-made example usually lacks
        {"question": "Names?", "query": "SELECT name FROM singer", "db": str(db_file)},  # fine
        {"sql": "SELECT 1", "db": str(db_file.parent / "missing.sqlite")},
        "SELECT 1",
    ]
    with pytest.raises(DataError) as caught:
        as_examples(items)
    message = str(caught.value)
    assert message.startswith("trainset: 3 of the examples cannot be used")
    assert "item 0: sql" in message and "db (a SQLite file path" in message
    assert "item 2: question, db (no SQLite file" in message
    assert "item 3: a str" in message and "item 1" not in message


def test_repeated_question_ids_are_named(db_file: Path) -> None:
    item = {"question": "q", "sql": "SELECT 1", "db": str(db_file), "question_id": "a"}
    with pytest.raises(DataError, match="question_id 'a' repeats item 0"):
        as_examples([item, item])


def test_benchmark_examples_pass_through_unchanged(spider_root: Path) -> None:
    train = load_spider("train", root=spider_root)[:3]
    prepared = as_examples(train)
    assert [dict(p.items()) for p in prepared] == [dict(t.items()) for t in train]


def test_compile_checks_the_trainset_before_the_optimizer(db_file: Path) -> None:
    lm = DummyLM([])
    with dspy.context(lm=lm), pytest.raises(DataError, match="item 0: sql"):
        sqlweave.compile("direct", [dspy.Example(question="q", db_path=str(db_file))])
    assert not lm.history  # nothing ran


def test_compile_on_plain_dicts(db_file: Path) -> None:
    rows = [
        ("How many singers?", "SELECT count(*) FROM singer"),
        ("How many concerts?", "SELECT count(*) FROM concert"),
        ("How many stadiums?", "SELECT count(*) FROM stadium"),
    ]
    train = [{"question": q, "sql": s, "db": str(db_file)} for q, s in rows]
    answers = {q: {"sql": s} for q, s in rows}
    with dspy.context(lm=DummyLM(answers)):
        compiled = sqlweave.compile(
            "direct", train[:2], train[2:], optimizer="bootstrap", progress=False
        )
    assert len(compiled.program.generate.demos) == 2
    assert compiled.meta.val_ex_pct == 100.0 and compiled.meta.extra["validation"] == "given"


def test_default_validation_holds_out_databases(spider_root: Path) -> None:
    train = load_spider("train", root=spider_root)
    plain = [sqlweave.Example(ex.question, ex.gold_sql, ex.db_path) for ex in train[:120]]
    kept, val, how = default_validation(plain, n_val=10)
    assert len(val) == 10 and kept and "held-out" in how
    assert not {ex.db_id for ex in kept} & {ex.db_id for ex in val}
    assert len(kept) + len(val) <= len(plain)


def test_default_validation_of_spider_train_is_the_unseen_slice(spider_root: Path) -> None:
    from sqlweave.data import DataError as Missing
    from sqlweave.data import load_slice

    try:
        held = {ex.db_id for ex in load_slice("spider-train-val", root=spider_root)}
    except Missing:
        pytest.skip("this data root lacks the spider-train-val databases")
    train = load_spider("train", root=spider_root)
    kept, val, how = default_validation(train, n_val=20)
    assert len(val) == 20 and how.startswith("spider-train-val")
    assert {ex.db_id for ex in val} <= held and not {ex.db_id for ex in kept} & held


def _saved(tmp_path: Path, db_file: Path) -> Path:
    train = [
        {"question": "How many singers?", "sql": "SELECT count(*) FROM singer", "db": str(db_file)},
        {"question": "How many concerts?", "sql": "SELECT count(*) FROM concert", "db": str(db_file)},
    ]  # fmt: skip
    with dspy.context(lm=DummyLM([])):
        compiled = sqlweave.compile("direct", train, train[:1], optimizer="labeled", progress=False)
    return compiled.save(tmp_path / "direct.json")


def test_dspy_module_load_reads_an_artefact(tmp_path: Path, db_file: Path) -> None:
    path = _saved(tmp_path, db_file)
    bare = programs.get("direct")
    bare.load(str(path))  # DSPy's own Module.load
    assert len(bare.generate.demos) == 2
    assert bare.dump_state() == sqlweave.load(path).program.dump_state()


def test_format_1_artefact_is_read_with_ex_in_percent(tmp_path: Path, db_file: Path) -> None:
    path = _saved(tmp_path, db_file)
    payload = json.loads(path.read_text())
    meta = payload["meta"]
    old = {
        "format": "sqlweave-program",
        "format_version": 1,
        "versions": payload["versions"],
        "meta": {**{k: v for k, v in meta.items() if k != "val_ex_pct"}, "val_ex": 0.25},
        "state": {"generate": payload["generate"]},
    }
    path.write_text(json.dumps(old))
    program, loaded = load_program(path)
    assert loaded.val_ex_pct == 25.0 and loaded.val_ex == 0.25
    assert len(program.generate.demos) == 2


def test_the_readme_questions_file_format(tmp_path: Path, db_file: Path) -> None:
    """The format the README shows for your own data: JSON Lines with question, sql, db_path
    (relative to the file) and optional evidence / question_id."""
    from sqlweave.data import load_questions

    lines = [
        {"question": "How many singers?", "sql": "SELECT count(*) FROM singer", "db_path": db_file.name},
        {"question": "Stadium names?", "sql": "SELECT name FROM stadium", "db_path": db_file.name,
         "evidence": "", "question_id": "mine-2"},
    ]  # fmt: skip
    path = tmp_path / "questions.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    first, second = load_questions(path)
    assert first.gold_sql == "SELECT count(*) FROM singer" and first.db_path == str(db_file)
    assert second.question_id == "mine-2" and first.db_id == "concert"
    assert as_examples([first, second])[1].gold_sql == "SELECT name FROM stadium"
