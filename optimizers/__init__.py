"""Compile, save and load sqlweave programs.

Optimizers are DSPy teleprompters (:class:`SQLTeleprompter`) registered by name
(:mod:`sqlweave.optimizers.registry`: ``labeled``, ``bootstrap``, ``random_search``, ``knn``,
``mipro``, ``gepa`` and the switch ``search``; ``a+b`` runs them in sequence). The LM-call budget
(:class:`Budgeted`) and resuming (:class:`Checkpointed`) are wrappers around any of them;
:func:`run_optimizer` puts the three together and reports the cost.
"""

from sqlweave.optimizers.artifact import (
    ArtifactError,
    ArtifactMeta,
    load_program,
    read_artifact,
    save_program,
    trainset_hash,
)
from sqlweave.optimizers.base import SQLTeleprompter
from sqlweave.optimizers.budget import Budgeted, BudgetExhausted, CallBudget
from sqlweave.optimizers.checkpoint import Checkpoint, Checkpointed
from sqlweave.optimizers.compile import (
    OPTIMIZERS,
    CompileOutcome,
    CompileReport,
    attach_knn,
    compile_program,
    complete_examples,
    ex_feedback_metric,
    gold_demos,
    run_optimizer,
    split_train_val,
)
from sqlweave.optimizers.registry import Sequential, UnknownOptimizerError, available, register
from sqlweave.optimizers.registry import get as get_optimizer
from sqlweave.optimizers.search import DEFAULT_SPACES, SwitchSearch

__all__ = [
    "DEFAULT_SPACES",
    "OPTIMIZERS",
    "ArtifactError",
    "ArtifactMeta",
    "BudgetExhausted",
    "Budgeted",
    "CallBudget",
    "Checkpoint",
    "Checkpointed",
    "CompileOutcome",
    "CompileReport",
    "SQLTeleprompter",
    "Sequential",
    "SwitchSearch",
    "UnknownOptimizerError",
    "attach_knn",
    "available",
    "compile_program",
    "complete_examples",
    "ex_feedback_metric",
    "get_optimizer",
    "gold_demos",
    "load_program",
    "read_artifact",
    "register",
    "run_optimizer",
    "save_program",
    "split_train_val",
    "trainset_hash",
]
