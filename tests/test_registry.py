"""Optimizers as DSPy teleprompters in a registry; budget and checkpoint as wrappers around any
optimizer, DSPy's own included. Data: the Spider demo bundle shipped in the package."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dspy
import pytest
from conftest import DEMO_ROOT as DEMO
from dspy.teleprompt import Teleprompter
from dspy.utils import DummyLM

from sqlweave import programs
from sqlweave.data import load_spider
from sqlweave.errors import SqlweaveError
from sqlweave.optimizers import (
    Budgeted,
    Checkpointed,
    Sequential,
    SQLTeleprompter,
    UnknownOptimizerError,
    available,
    get_optimizer,
    register,
    registry,
    run_optimizer,
)

WRONG = "SELECT 1"


@pytest.fixture(scope="module")
def train() -> list[dspy.Example]:
    return load_spider("train", root=DEMO)[:6]


def wrong_lm() -> DummyLM:
    return DummyLM({"": {"sql": WRONG}})


# --- lookups ----------------------------------------------------------------------------------


def test_every_built_in_optimizer_is_a_teleprompter() -> None:
    assert {"labeled", "bootstrap", "random_search", "knn", "mipro", "gepa"} <= set(available())
    for name in available():
        teleprompter = get_optimizer(name)
        assert isinstance(teleprompter, Teleprompter) and teleprompter.name == name
    assert get_optimizer("bootstrap", max_demos=2).max_demos == 2
    assert get_optimizer("random_search", candidates=5).candidates == 5


def test_unknown_names_and_options_are_clear_errors() -> None:
    with pytest.raises(UnknownOptimizerError, match="unknown optimizer 'nope'; choose one of"):
        get_optimizer("nope")
    with pytest.raises(SqlweaveError, match="unknown optimizer 'nope'"):
        get_optimizer("bootstrap+nope")
    with pytest.raises(ValueError, match="unknown optimizer ''"):
        get_optimizer("bootstrap+")
    with pytest.raises(ValueError, match="appears twice"):
        get_optimizer("bootstrap+bootstrap")
    with pytest.raises(ValueError, match="option colour does not apply to optimizer 'labeled'"):
        get_optimizer("labeled", colour="red")
    # Options every compile passes along are taken by those that want them, ignored by others.
    assert get_optimizer("knn", candidates=3, proposer_lm="x").max_demos == 4
    with pytest.raises(ValueError, match="max_demos must be 0 or more"):
        get_optimizer("bootstrap", max_demos=-1)


def test_a_sequence_is_one_teleprompter() -> None:
    sequence = get_optimizer("labeled+bootstrap", max_demos=1)
    assert isinstance(sequence, Sequential) and sequence.name == "labeled+bootstrap"
    assert [s.name for s in sequence.wrapped] == ["labeled", "bootstrap"]
    assert all(s.max_demos == 1 for s in sequence.wrapped)


class _Instruct(SQLTeleprompter):
    """A user's optimizer: rewrites every instruction, makes no LM call."""

    name = "instruct"

    def __init__(self, *, text: str = "Write SQLite.", **common: Any) -> None:
        super().__init__(**common)
        self.text = text

    def compile(self, student, *, trainset, valset=None, **kwargs):
        program = student.reset_copy()
        for _, predictor in program.named_predictors():
            predictor.signature = predictor.signature.with_instructions(self.text)
        self.details = {"text": self.text}
        return program


def test_a_registered_optimizer_compiles_through_run_optimizer(
    train: list[dspy.Example], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())
    register("instruct", _Instruct)
    with pytest.raises(ValueError, match="already registered"):
        register("instruct", _Instruct)
    with pytest.raises(TypeError, match="not a SQLTeleprompter"):
        register("other", dict)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="letters, digits"):
        register("a+b", _Instruct)
    student = programs.get("direct")
    with dspy.context(lm=DummyLM([])):
        out = run_optimizer(student, train, train[:1], optimizer="instruct", text="Be brief.")
        both = run_optimizer(student, train, train[:1], optimizer="instruct+labeled", max_demos=1)
    assert out.program.generate.signature.instructions == "Be brief."
    assert out.report.details == {"text": "Be brief."} and out.report.lm_calls == 0
    # The sequence: instructions from the first, demos from the second, on the first's program.
    assert both.program.generate.signature.instructions == "Write SQLite."
    assert len(both.program.generate.demos) == 1
    # The student is never changed.
    assert student.generate.signature.instructions != "Be brief." and not student.generate.demos


# --- wrappers ---------------------------------------------------------------------------------


def test_budget_wraps_a_plain_dspy_optimizer(train: list[dspy.Example]) -> None:
    """DSPy's BootstrapFewShot knows nothing of budgets; the wrapper stops it at the cap."""
    from sqlweave.metrics import ex_metric
    from sqlweave.optimizers.demos import complete_examples

    student = programs.get("direct")
    completed = complete_examples(student, train).examples
    wrapped = Budgeted(
        dspy.BootstrapFewShot(metric=ex_metric, max_bootstrapped_demos=4, max_labeled_demos=0),
        max_calls=2,
    )
    lm = wrong_lm()
    with dspy.context(lm=lm):
        compiled = wrapped.compile(student, trainset=completed)
    assert len(lm.history) == 2 and wrapped.cap.calls == 2 and wrapped.budget_stopped
    assert not compiled.generate.demos and compiled is not student


def test_checkpoint_and_budget_wrap_any_optimizer(
    train: list[dspy.Example], tmp_path: Path
) -> None:
    """Checkpointed(Budgeted(bootstrap)): calls persist, finished units replay, the cap holds."""
    path = tmp_path / "ckpt.json"

    def once(budget: int | None) -> tuple[Any, Budgeted, Checkpointed, DummyLM]:
        inner = Budgeted(get_optimizer("bootstrap", max_demos=4), budget)
        outer = Checkpointed(inner, path)
        lm = wrong_lm()
        with dspy.context(lm=lm):
            compiled = outer.compile(programs.get("direct"), trainset=train, valset=train[:1])
        return compiled, inner, outer, lm

    _, inner, _, lm = once(3)
    assert len(lm.history) == 3 and inner.budget_stopped
    assert json.loads(path.read_text())["lm_calls"] == 3
    _, inner, outer, lm = once(3)  # spent: nothing is sent, finished units replay
    assert not lm.history and inner.cap.calls == 3 and outer.last.reused >= 2
    _, inner, outer, lm = once(None)  # uncapped: goes on where the file stopped
    assert len(lm.history) == len(train) - outer.last.reused and inner.cap.used == 3


def test_a_sequence_skips_what_the_spent_budget_cannot_pay(train: list[dspy.Example]) -> None:
    """mipro after a bootstrap that spent the budget does not start (it would make calls)."""
    sequence = Budgeted(get_optimizer("bootstrap+mipro", max_demos=1), max_calls=2)
    lm = wrong_lm()
    with dspy.context(lm=lm):
        sequence.compile(programs.get("direct"), trainset=train, valset=train[:2])
    assert len(lm.history) == 2 and sequence.budget_stopped
