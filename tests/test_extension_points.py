"""A new corrector, program or retriever is one module-level class plus one registration.

Each toy below is added the way a user would add their own: a class and one ``register`` call,
then built by name like the built-in ones: a corrector by ``corrector="toy"`` in any program and
in a chain (``rules+toy``), a program by ``programs.get("toy")`` with its search space declared
beside its switches (the switch search reads it; nothing else is edited), a retriever by
``make_retriever("toy", pool)`` and a demo strategy's name. Registries are copied per test so
nothing leaks.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.db import Database
from sqlweave.optimizers.search import DEFAULT_SPACES, check_space, default_space
from sqlweave.programs import stages
from sqlweave.programs.base import SQLProgram
from sqlweave.programs.stages import retrieval

QUESTION = "How many singers are there?"
COUNT = "SELECT count(*) FROM singer"


@pytest.fixture()
def db(tmp_path: Path, demo_concert_db: Path) -> Database:
    return Database.open(shutil.copy(demo_concert_db, tmp_path / "concert_singer.sqlite"))


@pytest.fixture()
def registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies of the registries the toys go into, restored after the test."""
    monkeypatch.setattr(programs, "PROGRAMS", programs.PROGRAMS.copy())
    monkeypatch.setitem(stages.STAGES, "corrector", stages.STAGES["corrector"].copy())
    monkeypatch.setattr(retrieval, "RETRIEVERS", retrieval.RETRIEVERS.copy())


# --- the toys: one class each -----------------------------------------------------------------


class UpperCorrector(dspy.Module):
    """A corrector: SQL keywords in capitals (the corrector protocol, no LM call)."""

    def forward(self, sql: str, **_: Any) -> dspy.Prediction:
        fixed = sql.replace("select", "SELECT").replace(" from ", " FROM ")
        history = [{"sql": sql, "feedback": "upper"}] if fixed != sql else []
        return dspy.Prediction(sql=fixed, rounds=int(fixed != sql), history=history)


class EchoSQL(SQLProgram):
    """A program: one generation, then its corrector (a stage switch like the seeds')."""

    name = "toy"
    SEARCH_SPACE: ClassVar[dict[str, tuple[Any, ...]]] = {"corrector": ("none", "rules")}

    def __init__(self, corrector: str | dspy.Module = "none") -> None:
        super().__init__()
        self.generate = dspy.Predict("question -> sql")
        self.corrector = stages.build("corrector", corrector)

    def answer(self, *, question: str, db: Database, evidence: str) -> dspy.Prediction:
        ran = stages.Ran()
        sql = self.generate(question=question).sql
        ran.record("generator")
        fixed = ran("corrector", self.corrector, sql=sql, db=db, question=question)
        return stages.result(fixed.sql, stages=ran, history=fixed.history)


class FirstInPool(retrieval.BaseRetriever):
    """A retriever: the pool in its own order (the shared options and guards still apply)."""

    name = "toy"

    def scores(self, example: Any) -> Any:
        import numpy as np

        return -np.arange(len(self.pool), dtype=float)


# --- one registration each, then built by name --------------------------------------------------


def test_a_toy_corrector_is_one_class_and_one_registration(registries, db: Database) -> None:
    stages.register("corrector", "toy", UpperCorrector)
    assert stages.build("corrector", "toy")(sql="select 1").sql == "SELECT 1"
    chain = stages.build("corrector", "toy+rules")
    out = chain(sql="select count(*) from singer", db=db, question=QUESTION)
    assert out.sql == "SELECT count(*) FROM singer" and out.rounds == 1
    program = programs.get("direct", corrector="toy+rules")
    assert program.switches["corrector"] == "toy+rules"
    with dspy.context(lm=DummyLM([{"sql": "select count(*) from singer"}])):
        pred = program(question=QUESTION, db=db)
    assert pred.sql == "SELECT count(*) FROM singer" and pred.stages[-1] == "corrector"


def test_a_toy_program_is_one_class_and_one_registration(registries, db: Database) -> None:
    programs.register("toy", EchoSQL)
    program = programs.get("toy", corrector="rules")
    with dspy.context(lm=DummyLM([{"sql": COUNT}])):
        pred = program(question=QUESTION, db=db)
    assert pred.sql == COUNT and pred.stages == ["generator", "corrector"]
    # Its search space came with the class: the switch search and DEFAULT_SPACES read it.
    assert DEFAULT_SPACES["toy"] == {"corrector": ("none", "rules")}
    space = check_space(program, default_space(program), lambda **s: programs.get("toy", **s))
    assert space == {"corrector": ["none", "rules"]}


def test_a_toy_retriever_is_one_class_and_one_registration(registries) -> None:
    pool = [
        dspy.Example(question=f"q{i}", db_id=f"db{i}", gold_sql="SELECT 1", split="train")
        for i in range(4)
    ]
    retrieval.RETRIEVERS.register("toy", FirstInPool)
    assert "toy" in retrieval.RETRIEVERS
    found = retrieval.make_retriever("toy", pool, exclude_same_db=True).retrieve(
        {"question": "q9", "db_id": "db0"}, 2
    )
    assert [ex.question for ex in found] == ["q1", "q2"]
