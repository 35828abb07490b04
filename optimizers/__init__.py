"""Compile, save and load sqlweave programs."""

from sqlweave.optimizers.artifact import (
    ArtifactError,
    ArtifactMeta,
    load_program,
    save_program,
    trainset_hash,
)
from sqlweave.optimizers.compile import OPTIMIZERS, compile_program, split_train_val

__all__ = [
    "OPTIMIZERS",
    "ArtifactError",
    "ArtifactMeta",
    "compile_program",
    "load_program",
    "save_program",
    "split_train_val",
    "trainset_hash",
]
