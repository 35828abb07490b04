"""Compile, save and load sqlweave programs."""

from sqlweave.optimizers.artifact import (
    ArtifactError,
    ArtifactMeta,
    load_program,
    read_artifact,
    save_program,
    trainset_hash,
)
from sqlweave.optimizers.budget import BudgetExhausted, CallBudget
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

__all__ = [
    "OPTIMIZERS",
    "ArtifactError",
    "ArtifactMeta",
    "BudgetExhausted",
    "CallBudget",
    "CompileOutcome",
    "CompileReport",
    "attach_knn",
    "compile_program",
    "complete_examples",
    "ex_feedback_metric",
    "gold_demos",
    "load_program",
    "read_artifact",
    "run_optimizer",
    "save_program",
    "split_train_val",
    "trainset_hash",
]
