"""Compiling a program against execution accuracy on train data with DSPy's optimizers."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

import dspy

from sqlweave.programs import SQLProgram

logger = logging.getLogger(__name__)

OPTIMIZERS = ("labeled", "bootstrap")


def split_train_val(
    examples: list[dspy.Example], val_fraction: float = 0.2, seed: int = 0
) -> tuple[list[dspy.Example], list[dspy.Example]]:
    """A fixed, seeded train/validation split, so compiles are comparable across runs."""
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    n_val = max(1, int(len(shuffled) * val_fraction)) if len(shuffled) > 1 else 0
    return shuffled[n_val:], shuffled[:n_val]


def compile_program(
    program: SQLProgram,
    trainset: list[dspy.Example],
    *,
    optimizer: str = "bootstrap",
    metric: Callable[..., Any] | None = None,
    max_demos: int = 4,
    seed: int = 0,
) -> SQLProgram:
    """Return a compiled copy of ``program``; the student itself is never modified.

    ``labeled`` attaches ``max_demos`` train pairs as demos; ``bootstrap`` runs the program on
    train questions and keeps the traces whose SQL matches the gold result (metric = EX).
    """
    if metric is None:
        from sqlweave.metrics import ex_metric

        metric = ex_metric
    if optimizer == "labeled":
        teleprompter = dspy.LabeledFewShot(k=max_demos)
        return teleprompter.compile(program.reset_copy(), trainset=trainset, sample=True)
    if optimizer == "bootstrap":
        teleprompter = dspy.BootstrapFewShot(
            metric=metric,
            max_bootstrapped_demos=max_demos,
            max_labeled_demos=max_demos,
            max_rounds=1,
        )
        return teleprompter.compile(program.reset_copy(), trainset=trainset)
    raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
