"""Compiling a program against execution accuracy: an optimizer from the registry, under a
budget and a checkpoint, with a report of what it cost.

:func:`run_optimizer` looks the optimizer up by name in :mod:`sqlweave.optimizers.registry`
(``bootstrap``; ``search+bootstrap`` for a sequence), wraps it in
:class:`~sqlweave.optimizers.budget.Budgeted` (the LM-call cap) and, with ``checkpoint=PATH``,
in :class:`~sqlweave.optimizers.checkpoint.Checkpointed` (resume), compiles a copy of the program
and returns it with a :class:`CompileReport`. The optimizers, by name:

- ``labeled``, ``bootstrap``, ``random_search``, ``knn``, ``mipro``, ``gepa``: demos and
  instructions through DSPy's optimizers (:mod:`sqlweave.optimizers.teleprompters`);
- ``search``: the program's own switches and stage choices, searched with Optuna against the
  metric on the validation set (:mod:`sqlweave.optimizers.search`).

**Budget.** ``budget`` caps the LM calls of the optimization (the validation run afterwards is
reported separately): a :class:`~sqlweave.optimizers.budget.CallBudget` callback refuses the call
that would exceed it, and the optimizer keeps its best result so far (see each optimizer).

**Resume.** With ``checkpoint=PATH`` every finished unit of work is written there at once (a
bootstrapped train example, a scored random-search candidate, a scored validation question of a
search trial). A rerun with the same file, program, data and settings skips them without an LM
call; the unit in flight when the run died is redone, and DSPy's on-disk response cache
(``~/.dspy_cache``, keyed by a sha256 of the full request; on in :func:`sqlweave.lm.build_lm`)
replays its finished calls for deterministic LMs. The checkpoint also keeps the running total of
LM calls, saved before each call is sent, so ``budget`` caps the whole compile however often it
is killed and resumed (a rerun of a compile that spent its budget makes no call and rebuilds the
same program from its finished units), and ``lm_calls`` in the report and the artefact is that
total.

**Sequences.** ``optimizer="search+bootstrap"`` runs the switch search, then bootstraps demos for
the program it chose, in one compile under one budget and one checkpoint.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dspy

from sqlweave.optimizers import registry
from sqlweave.optimizers.budget import Budgeted
from sqlweave.optimizers.checkpoint import Checkpoint, Checkpointed, example_key
from sqlweave.optimizers.demos import complete_examples, gold_demos, trim_demos
from sqlweave.optimizers.knn import attach_knn
from sqlweave.optimizers.teleprompters import ex_feedback_metric
from sqlweave.programs import SQLProgram

logger = logging.getLogger(__name__)

OPTIMIZERS = registry.BUILTIN
"""The built-in optimizer names (:func:`sqlweave.optimizers.registry.available` lists every
registered one); any two or more joined by ``+`` run in sequence."""


def split_train_val(
    examples: list[dspy.Example], val_fraction: float = 0.2, seed: int = 0
) -> tuple[list[dspy.Example], list[dspy.Example]]:
    """A fixed, seeded train/validation split, so compiles are comparable across runs."""
    shuffled = list(examples)
    random.Random(seed).shuffle(shuffled)
    n_val = max(1, int(len(shuffled) * val_fraction)) if len(shuffled) > 1 else 0
    return shuffled[n_val:], shuffled[:n_val]


@dataclass
class CompileReport:
    """What a compile did: calls used against the budget, time, resumed work, optimizer details.

    ``lm_calls`` is the total over every run of a resumed compile (earlier runs' share:
    ``resumed_calls``); ``seconds`` and ``cached_calls`` are this run's.
    """

    optimizer: str
    budget: int | None
    lm_calls: int = 0
    resumed_calls: int = 0
    cached_calls: int = 0
    budget_exhausted: bool = False
    seconds: float = 0.0
    n_train: int = 0
    n_val: int = 0
    resumed_units: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for an artefact or a log."""
        return asdict(self)


@dataclass
class CompileOutcome:
    """The compiled program and its report."""

    program: SQLProgram
    report: CompileReport


def run_optimizer(
    program: SQLProgram,
    trainset: list[dspy.Example],
    valset: list[dspy.Example] | None = None,
    *,
    optimizer: str = "bootstrap",
    metric: Callable[..., Any] | None = None,
    budget: int | None = None,
    max_demos: int = 4,
    seed: int = 0,
    proposer_lm: Any = None,
    checkpoint: str | Path | None = None,
    progress: bool = False,
    candidates: int = 2,
    **options: Any,
) -> CompileOutcome:
    """Compile a copy of ``program`` (the student is never modified) and report the cost.

    ``optimizer`` is a registry name or a ``+`` sequence of them; ``options`` go to the
    optimizers that take them (search: ``space``, ``n_trials``, ``val_size``, ``sampler``).
    ``valset=None`` splits ``trainset`` with :func:`split_train_val` (fixed, seeded). See the
    module docstring for the budget and resuming.
    """
    from sqlweave.lm import track_usage

    if not trainset:
        raise ValueError("the train set is empty")
    if budget is not None and budget < 0:
        raise ValueError(f"budget must be 0 or more LM calls, not {budget}")
    teleprompter = registry.get(
        optimizer,
        metric=metric,
        max_demos=max_demos,
        seed=seed,
        progress=progress,
        candidates=candidates,
        proposer_lm=proposer_lm,
        **options,
    )
    if valset is None:
        trainset, valset = split_train_val(list(trainset), seed=seed)
    trainset, valset = list(trainset), list(valset)

    budgeted = Budgeted(teleprompter, budget)
    outer: Any = budgeted
    if checkpoint is not None:
        # A proposer given as a string names its model; as an LM object, its .model does.
        outer = Checkpointed(
            budgeted, checkpoint, {"proposer": getattr(proposer_lm, "model", proposer_lm)}
        )
    report = CompileReport(optimizer, budget, n_train=len(trainset), n_val=len(valset))
    started = time.perf_counter()
    with track_usage() as usage:
        compiled = outer.compile(program, trainset=trainset, valset=valset)
    trim_demos(compiled)
    cap = budgeted.cap
    report.lm_calls = cap.calls
    report.resumed_calls = cap.used
    report.cached_calls = usage.cached_calls
    report.budget_exhausted = budgeted.budget_stopped or cap.exhausted
    report.seconds = round(time.perf_counter() - started, 3)
    report.resumed_units = outer.last.reused if isinstance(outer, Checkpointed) else 0
    report.details = dict(budgeted.details)
    if report.budget_exhausted:
        logger.warning("compile stopped at the budget of %s LM calls", budget)
    return CompileOutcome(compiled, report)


def compile_program(
    program: SQLProgram,
    trainset: list[dspy.Example],
    *,
    optimizer: str = "bootstrap",
    metric: Callable[..., Any] | None = None,
    max_demos: int = 4,
    seed: int = 0,
    **options: Any,
) -> SQLProgram:
    """The compiled copy of ``program`` only; ``trainset`` is used whole as the train set.

    Kept for callers that want no report; see :func:`run_optimizer` for the options.
    """
    valset = options.pop("valset", None)
    if valset is None:
        valset = list(trainset)
    return run_optimizer(
        program,
        trainset,
        valset,
        optimizer=optimizer,
        metric=metric,
        max_demos=max_demos,
        seed=seed,
        **options,
    ).program


__all__ = [
    "OPTIMIZERS",
    "Checkpoint",
    "CompileOutcome",
    "CompileReport",
    "attach_knn",
    "compile_program",
    "complete_examples",
    "example_key",
    "ex_feedback_metric",
    "gold_demos",
    "run_optimizer",
    "split_train_val",
]
