"""sqlweave: published text-to-SQL pipelines as declarative, compilable DSPy programs.

``import sqlweave`` stays light (no DSPy, torch or llama.cpp): the API below is imported from
:mod:`sqlweave.api` on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlweave.db import Database, ExecutionError, QueryResult
from sqlweave.errors import SqlweaveError

if TYPE_CHECKING:
    from sqlweave.api import CompiledProgram, Result, ask, compile, configure, load
    from sqlweave.examples import Example
    from sqlweave.optimizers.artifact import ArtifactError
    from sqlweave.synthesis.pairs import synthesize

__version__ = "0.1.0"

_LAZY = {
    "CompiledProgram": "sqlweave.api",
    "Result": "sqlweave.api",
    "Example": "sqlweave.examples",
    "ask": "sqlweave.api",
    "compile": "sqlweave.api",
    "configure": "sqlweave.api",
    "load": "sqlweave.api",
    "ArtifactError": "sqlweave.optimizers.artifact",
    "synthesize": "sqlweave.synthesis.pairs",
}


def __getattr__(name: str) -> Any:
    """Import the API on first use, so ``import sqlweave`` does not pull in DSPy."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sqlweave' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ArtifactError",
    "CompiledProgram",
    "Database",
    "Example",
    "ExecutionError",
    "QueryResult",
    "Result",
    "SqlweaveError",
    "__version__",
    "ask",
    "compile",
    "configure",
    "load",
    "synthesize",
]
