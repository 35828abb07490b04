"""Stages say what they did and what they can do (issue 36).

The ``stages`` field is recorded by a :class:`~sqlweave.programs.stages.Ran` from the stages a
program called, one label per role in every program; programs branch on the capabilities a stage
declares (``is_noop``, ``picks_first``, ``links_forward``, ``links_backward``), so a user's stage
that declares them is treated like the built-in one, whatever its class.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.db import Database
from sqlweave.programs import stages
from sqlweave.programs.mage import MageCorrector
from sqlweave.programs.rsl import RSLSQL
from sqlweave.programs.stages.demos import DemoSource
from sqlweave.programs.stages.linking import BidirectionalLinker, DraftColumnsLinker, ForwardLinker

REPO = Path(__file__).resolve().parents[1]
SEEDS = ("direct", "dubo", "mage", "pet", "rsl", "sea", "weave")
QUESTION = "What are the names of singers older than 40?"
OLDER_40 = "SELECT Name FROM singer WHERE Age > 40"


@pytest.fixture()
def db(tmp_path: Path, demo_concert_db: Path) -> Database:
    """A copy of the bundled concert_singer database (value indexes are cached beside it)."""
    return Database.open(shutil.copy(demo_concert_db, tmp_path / "concert_singer.sqlite"))


# --- what the built-in stages declare ---------------------------------------------------------------


def test_the_do_nothing_stages_declare_it() -> None:
    assert stages.declares(stages.build("linker", "none"), "is_noop")
    assert stages.declares(stages.build("corrector", "none"), "is_noop")
    assert not stages.declares(stages.build("corrector", "rules"), "is_noop")
    assert stages.declares(MageCorrector(rule_correction=False, prompt_correction=False), "is_noop")
    assert not stages.declares(MageCorrector(prompt_correction=False), "is_noop")
    assert stages.declares(DemoSource("jaccard", 0), "is_noop")
    assert not stages.declares(DemoSource("jaccard", 2), "is_noop")


def test_selectors_and_linkers_declare_what_they_read() -> None:
    assert stages.declares(stages.build("selector", "first"), "picks_first")
    assert not stages.declares(stages.build("selector", "vote"), "picks_first")
    forward = ForwardLinker()
    assert stages.declares(forward, "links_forward") and not stages.declares(
        forward, "links_backward"
    )
    assert stages.declares(BidirectionalLinker(), "links_forward")
    assert not stages.declares(BidirectionalLinker(use_forward=False), "links_forward")
    # A stage that declares nothing has the protocol's defaults: it reads the draft it is given.
    assert stages.declares(DraftColumnsLinker(), "links_backward")
    assert not stages.declares(DraftColumnsLinker(), "links_forward")
    with pytest.raises(ValueError, match="unknown stage capability"):
        stages.declares(forward, "links_sideways")


# --- the recorder -------------------------------------------------------------------------------------


def test_ran_records_labels_in_order_and_skips_no_ops() -> None:
    ran = stages.Ran()
    out = ran("corrector", stages.build("corrector", "none"), sql="SELECT 1")
    assert out.sql == "SELECT 1" and list(ran) == []  # called, but it did nothing
    ran.record("generator")
    ran("selector", stages.build("selector", "first"), candidates=["", "SELECT 2"])
    ran.record("demos", DemoSource("jaccard", 0))
    assert list(ran) == ["generator", "selector"]
    with pytest.raises(ValueError, match="unknown stage label 'vote'"):
        ran.record("vote")
    assert stages.result("SELECT 2", stages=ran).stages == ["generator", "selector"]


def test_seeds_never_ask_which_stage_they_were_given() -> None:
    """No ``isinstance`` on a stage attribute and no ``name_of(...) ==`` inside the seeds."""
    found = []
    for name in SEEDS:
        path = REPO / "programs" / f"{name}.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            called = ast.unparse(node.func)
            text = ast.unparse(node)
            if called == "isinstance" and "self." in ast.unparse(node.args[0]):
                found.append(f"{path.name}: {text}")
            if called.endswith("name_of"):
                found.append(f"{path.name}: {text}")
    assert found == []


# --- the same words in every program -------------------------------------------------------------------


def test_weave_with_an_lm_selector_records_a_selector_not_a_vote(db: Database) -> None:
    answers = [{"sql": OLDER_40}, {"sql": "SELECT Name FROM singer"}, {"choice": "1"}]
    program = programs.get("weave", samples=2, value_hints=False, repair_rounds=0, selector="lm")
    with dspy.context(lm=DummyLM(answers)):
        pred = program(question=QUESTION, db=db)
    assert pred.stages == ["generator", "sampler", "selector"] and pred.sql == OLDER_40


def test_a_correction_is_labelled_alike_in_every_program(db: Database) -> None:
    """Dubo's retry, PET's correction, RSL's self-correction, SEA's DEA, weave's repair: one word."""
    runs = {
        "dubo_v1": {},
        "pet": {"num_demos": 0, "consistency": "none", "corrector": "execution"},
        "rsl": {**RSLSQL.ABLATIONS["step1"], "num_demos": 0, "self_correction": True},
        "weave": {"samples": 1, "value_hints": False},
        "direct": {"corrector": "execution"},
    }
    for name, switches in runs.items():
        with dspy.context(lm=DummyLM([{"sql": OLDER_40, "columns": '["singer.Name"]'}] * 4)):
            pred = programs.get(name, **switches)(question=QUESTION, db=db)
        assert pred.stages.count("corrector") == 1, (name, pred.stages)
        assert set(pred.stages) <= set(stages.LABELS), (name, pred.stages)


# --- a user's stage is treated like the built-in one it declares itself as ------------------------------


class Keeper(dspy.Module):
    """A selector of the user's own that keeps the first candidate, and says so."""

    picks_first = True

    def forward(self, candidates: list[str], **_: Any) -> dspy.Prediction:
        return dspy.Prediction(sql=candidates[0], choice=1, lm_called=False)


class Untouched(dspy.Module):
    """A corrector of the user's own that does nothing, and says so."""

    is_noop = True

    def forward(self, sql: str, **_: Any) -> dspy.Prediction:
        raise AssertionError("a no-op corrector is never called where a seed can skip it")


class ForwardOnly(dspy.Module):
    """A forward linker of the user's own: lists singer's columns before any draft."""

    links_forward = True
    links_backward = False

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def forward(self, **inputs: Any) -> dspy.Prediction:
        from sqlweave.programs.stages.linking import LinkedSchema

        self.calls.append(inputs)
        return dspy.Prediction(linked=LinkedSchema(columns={("singer", "Name")}))


def test_a_user_selector_that_picks_first_is_not_asked_to_choose(db: Database) -> None:
    program = programs.get("dubo_v1", selector=Keeper())
    bad = "SELECT nme FROM singer"
    with dspy.context(lm=DummyLM([{"sql": bad}, {"sql": OLDER_40}])):
        pred = program(question=QUESTION, db=db)
    assert pred.sql == OLDER_40 and pred.stages == ["generator", "corrector"]


def test_a_user_corrector_that_does_nothing_is_skipped(db: Database) -> None:
    program = programs.get("sea", bias_elimination=False, corrector=Untouched())
    with dspy.context(lm=DummyLM([{"sql": OLDER_40}])):
        pred = program(question=QUESTION, db=db)
    assert pred.sql == OLDER_40 and pred.adjusted_sql is None and "corrector" not in pred.stages


def test_a_user_forward_linker_gives_rsl_its_hints_and_reads_no_draft(db: Database) -> None:
    mine = ForwardOnly()
    switches = {**RSLSQL.ABLATIONS["step1"], "num_demos": 0, "value_samples": 0}
    program = programs.get("rsl", linker=mine, **switches)
    with dspy.context(lm=DummyLM([{"sql": OLDER_40}])):
        pred = program(question=QUESTION, db=db)
    assert len(mine.calls) == 1 and "sql" not in mine.calls[0]  # before SQL1, once
    assert pred.hints[0] == "Columns likely needed: singer.Name"
    assert pred.simplified_tables == ["singer"] and pred.stages == ["linker", "generator"]
