"""The proposing optimizers (MIPROv2, GEPA) share one compile: their search state is private, so a
budget spent before the search or during it gives the program back unchanged, and a search that
runs sees the completed train set and the validation set as given (the train set when none)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from sqlweave.optimizers import teleprompters
from sqlweave.optimizers.budget import BudgetExhausted


class _Student:
    def reset_copy(self) -> str:
        return "unchanged copy"


class _Search(teleprompters._Proposing):
    name = "fake"

    def __init__(self, *, raises: bool = False) -> None:
        super().__init__()
        self.raises = raises
        self.seen: tuple[Any, Any] | None = None

    def _propose(self, student: Any, trainset: Any, valset: Any) -> Any:
        self.seen = (trainset, valset)
        if self.raises:
            raise BudgetExhausted(3)
        return "searched"


@pytest.fixture
def completed(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each call of ``complete_examples``; its examples come back marked as completed."""
    calls: list[list[str]] = []

    def fake(student: Any, examples: list[str], progress: bool = False) -> SimpleNamespace:
        calls.append(list(examples))
        return SimpleNamespace(examples=[f"done:{e}" for e in examples])

    monkeypatch.setattr(teleprompters, "complete_examples", fake)
    return calls


def test_a_search_sees_the_completed_train_set_and_the_validation_set_as_given(completed):
    search = _Search()
    assert search.compile(_Student(), trainset=["a"]) == "searched"
    assert search.seen == (["done:a"], ["a"])
    assert search.compile(_Student(), trainset=["a"], valset=["v"]) == "searched"
    assert search.seen == (["done:a"], ["v"])
    assert not search.budget_stopped


def test_a_spent_budget_returns_the_program_unchanged_without_completing_anything(completed):
    search = _Search()
    search.budget = SimpleNamespace(remaining=0)
    assert search.compile(_Student(), trainset=["a"]) == "unchanged copy"
    assert search.budget_stopped and search.seen is None and completed == []


def test_a_budget_spent_during_the_search_returns_the_program_unchanged(completed):
    search = _Search(raises=True)
    assert search.compile(_Student(), trainset=["a"]) == "unchanged copy"
    assert search.budget_stopped and search.seen == (["done:a"], ["a"])


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: teleprompters.Labeled(max_demos=-1), "max_demos"),
        (lambda: teleprompters.RandomSearch(candidates=-2), "candidates"),
    ],
)
def test_a_negative_count_is_refused_by_name(make, name):
    with pytest.raises(ValueError, match=f"{name} must be 0 or more"):
        make()
